package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// WorkspaceError reports a workspace directory the sandbox user cannot enter, read
// and write. It wraps port.ErrInvalidSpec.
type WorkspaceError struct {
	Dir      string      // the host directory
	UID, GID int         // the sandbox user (GID -1 when the run's User names none)
	Mode     fs.FileMode // the directory's permission bits
	OwnerUID int         // the directory's owner
	OwnerGID int
	Reason   string // what is wrong, for people
}

// Error implements error.
func (e *WorkspaceError) Error() string {
	gid := "no gid"
	if e.GID >= 0 {
		gid = "gid " + strconv.Itoa(e.GID)
	}
	return fmt.Sprintf("%v: workspace %s (mode %04o, owner %d:%d): %s for the sandbox user uid %d (%s), which must enter, read and write it; create it with sandbox.NewWorkspace",
		port.ErrInvalidSpec, e.Dir, uint32(e.Mode.Perm()), e.OwnerUID, e.OwnerGID, e.Reason, e.UID, gid)
}

// Unwrap returns port.ErrInvalidSpec.
func (e *WorkspaceError) Unwrap() error { return port.ErrInvalidSpec }

// parseUser splits "uid[:gid]"; gid is -1 when absent.
func parseUser(user string) (uid, gid int, err error) {
	if user == "" {
		user = port.DefaultUser
	}
	u, g, hasGID := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err != nil || uid <= 0 {
		return 0, 0, port.Invalidf("user %q is not a numeric non-root uid[:gid]", user)
	}
	gid = -1
	if hasGID {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, port.Invalidf("user %q is not a numeric non-root uid[:gid]", user)
		}
	}
	return uid, gid, nil
}

// CheckWorkspace reports whether the sandbox user ("uid[:gid]", default
// port.DefaultUser) can enter, read and write dir, from the directory's owner and
// permission bits as the kernel applies them to a user with no supplementary groups
// (how sandboxes run). A *WorkspaceError says which uid and mode do not fit. It
// cannot see ACLs or a runtime's user namespace remapping; WithoutWorkspaceCheck
// turns the facade's check off for such hosts.
func CheckWorkspace(dir, user string) error {
	uid, gid, err := parseUser(user)
	if err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return port.Invalidf("workspace dir: %v", err)
	}
	if !fi.IsDir() {
		return port.Invalidf("workspace dir %s is not a directory", dir)
	}
	ouid, ogid, ok := owner(fi)
	if !ok {
		return nil // no owner to judge by on this platform
	}
	perm := fi.Mode().Perm()
	var bits fs.FileMode
	switch {
	case uid == ouid:
		bits = perm >> 6
	case gid >= 0 && gid == ogid:
		bits = perm >> 3
	default:
		bits = perm
	}
	var missing []string
	for _, b := range []struct {
		bit  fs.FileMode
		what string
	}{{4, "read"}, {2, "write"}, {1, "enter"}} {
		if bits&b.bit == 0 {
			missing = append(missing, b.what)
		}
	}
	if len(missing) > 0 {
		return &WorkspaceError{Dir: dir, UID: uid, GID: gid, Mode: perm, OwnerUID: ouid, OwnerGID: ogid,
			Reason: "cannot " + strings.Join(missing, ", ")}
	}
	return nil
}

// Workspace is a run's workspace on the host, made for the sandbox user by
// NewWorkspace. Its content is the agent's after a run: read it through Root, which
// never follows a link out of it.
type Workspace struct {
	holder string // private parent, mode 0700, removed with the workspace
	dir    string
}

// NewWorkspace creates an empty workspace directory under parent (os.TempDir() when
// empty) that the sandbox user ("uid[:gid]", default port.DefaultUser) can enter, read
// and write, inside a fresh private directory (mode 0700, the host's) that no other
// host user can enter: the sandbox reaches the workspace through its bind mount, not
// through the parent.
//
// The workspace is owned by the sandbox user with mode 0700 when this process may
// change owners (root, as with a rootful Docker or containerd); it is this process's
// own, mode 0700, when the sandbox user is this process's uid; otherwise it is mode
// 0777, still private behind its parent, and Remove may then be unable to delete what
// the agent made. Run a non-root host's sandboxes as its own uid (Request.User) for a
// clean Remove.
//
// The private parent holds a marker naming the owner (WithWorkspaceOwner, default
// port.DefaultOwner), the run and the creation time, so SweepWorkspaces can remove
// what a crashed host left behind.
func NewWorkspace(parent, user string, opts ...WorkspaceOption) (*Workspace, error) {
	uid, gid, err := parseUser(user)
	if err != nil {
		return nil, err
	}
	mark := workspaceMarker{Owner: port.DefaultOwner}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&mark); err != nil {
			return nil, fmt.Errorf("sandbox: workspace: %w", err)
		}
	}
	if gid < 0 {
		gid = uid // what the containerd adapter runs a bare uid with
	}
	if parent == "" {
		parent = os.TempDir()
	}
	holder, err := os.MkdirTemp(parent, "agentsandbox-ws-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	w := &Workspace{holder: holder, dir: filepath.Join(holder, "workspace")}
	fail := func(err error) (*Workspace, error) {
		_ = os.RemoveAll(holder)
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	if err := writeMarker(holder, mark); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(w.dir, 0o700); err != nil {
		return fail(err)
	}
	switch {
	case uid == os.Getuid():
	case os.Chown(w.dir, uid, gid) == nil:
	default:
		if err := os.Chmod(w.dir, 0o777); err != nil {
			return fail(err)
		}
	}
	return w, nil
}

// Dir is the workspace's host path, for Request.WorkspaceDir.
func (w *Workspace) Dir() string { return w.dir }

// Root opens the workspace for reading or writing its content without following a
// link out of it (the agent may have planted some). Close it after use.
func (w *Workspace) Root() (*os.Root, error) { return os.OpenRoot(w.dir) }

// Remove deletes the workspace and its private parent, whatever the agent left in
// it: links are removed, never followed, and directories the agent made unreadable
// are opened up (through the workspace root) where this process may. Removing a
// removed workspace is no error.
func (w *Workspace) Remove() error {
	err := os.RemoveAll(w.holder)
	if err == nil {
		return nil
	}
	if root, rerr := os.OpenRoot(w.dir); rerr == nil {
		openUp(root, ".", 0)
		root.Close()
	}
	if err := os.RemoveAll(w.holder); err != nil {
		return fmt.Errorf("sandbox: removing workspace %s: %w", w.dir, err)
	}
	return nil
}

// openUp makes every directory under dir (in root) searchable and writable by this
// process, so RemoveAll can empty it. It never leaves root and stops at a depth a
// real tree does not reach.
func openUp(root *os.Root, dir string, depth int) {
	if depth > 256 {
		return
	}
	_ = root.Chmod(dir, 0o700)
	f, err := root.Open(dir)
	if err != nil {
		return
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil && len(entries) == 0 {
		return
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 && e.IsDir() {
			openUp(root, path.Join(dir, e.Name()), depth+1)
		}
	}
}
