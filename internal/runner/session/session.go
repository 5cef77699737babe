// Package session holds what the runner adapters' long-running sandboxes
// (port.SessionRunner) share: the session's host directory (exposed sockets, output
// log, heartbeat), its labels, the log's readers, the symlink-safe socket dial and
// workspace file access, and the handle state every adapter's Session embeds.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// ExposeTarget is where a session's expose directory appears inside the sandbox; the
// bridge creates one socket per exposed port there.
const ExposeTarget = "/.agentsandbox/expose"

// Names inside a session's host directory. Only exposeDir is mounted into the
// sandbox: the heartbeat is out of its reach.
const (
	exposeDir     = "expose"
	heartbeatFile = "heartbeat"
)

// DefaultRoot is the parent of session directories when a runner sets none.
func DefaultRoot() string { return filepath.Join(os.TempDir(), "agentsandbox-sessions") }

// HeartbeatInterval is how often an open handle refreshes its session's heartbeat.
const HeartbeatInterval = 15 * time.Second

// SocketName is the file name of port's socket in the expose directory.
func SocketName(p int) string { return strconv.Itoa(p) + ".sock" }

// BridgeFlags are the bridge's flags that expose ports (bridgeapi.FlagExpose).
func BridgeFlags(ports []int) []string {
	if len(ports) == 0 {
		return nil
	}
	f := []string{"-" + bridgeapi.FlagExposeDir, ExposeTarget}
	for _, p := range ports {
		f = append(f, "-"+bridgeapi.FlagExpose, strconv.Itoa(p))
	}
	return f
}

// OutputFlags are the bridge's flags that keep a session's agent from ever blocking on
// the runtime's own output stream (what `docker logs` shows; the session's output is
// its log, LogFlags): while the runtime does not take it, up to the log limit is kept
// per stream (bridgeapi.FlagOutputCap).
func OutputFlags(limit int) []string {
	if limit <= 0 {
		return nil
	}
	room := min(1<<10, limit/2)
	return []string{"-" + bridgeapi.FlagOutputCap, strconv.Itoa(max(1, limit-room))}
}

// InsertFlags returns args (a bridge command line: the bridge's path first) with flags
// right after the bridge's path.
func InsertFlags(args, flags []string) []string {
	if len(flags) == 0 || len(args) == 0 {
		return args
	}
	out := make([]string, 0, len(args)+len(flags))
	out = append(out, args[0])
	out = append(out, flags...)
	return append(out, args[1:]...)
}

// CreateDir makes a session's host directory under root, named name, with its expose
// directory and its output log (two files of logLimit bytes) owned by the sandbox's
// user (the bridge creates the sockets and writes the log there) and a fresh
// heartbeat. root is created if missing.
func CreateDir(root, name, user string, logLimit int) (string, error) {
	if err := checkDirName(name); err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", fmt.Errorf("session root: %w", err)
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", fmt.Errorf("session dir: %w", err)
	}
	ed := filepath.Join(dir, exposeDir)
	if err := os.Mkdir(ed, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("expose dir: %w", err)
	}
	uid, gid := parseUser(user)
	if err := os.Chown(ed, uid, gid); err != nil {
		// Not root: let the sandbox's user in by mode instead (the directory's parent
		// is only traversable, and its name is random).
		if err := os.Chmod(ed, 0o733); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("expose dir: %w", err)
		}
	}
	if err := createLog(dir, user, logLimit); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if err := createControl(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if err := Heartbeat(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// ExposeDir is the part of a session's host directory mounted into the sandbox.
func ExposeDir(dir string) string { return filepath.Join(dir, exposeDir) }

// Heartbeat sets the session's heartbeat to now.
func Heartbeat(dir string) error {
	f := filepath.Join(dir, heartbeatFile)
	now := time.Now()
	if err := os.Chtimes(f, now, now); err == nil {
		return nil
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// LastHeartbeat returns the time of the session's last heartbeat.
func LastHeartbeat(dir string) (time.Time, error) {
	fi, err := os.Lstat(filepath.Join(dir, heartbeatFile))
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// AgeHeartbeat moves the session's heartbeat back to t (for tests and tools that
// simulate an abandoned session).
func AgeHeartbeat(dir string, t time.Time) error {
	return os.Chtimes(filepath.Join(dir, heartbeatFile), t, t)
}

// OwnDir returns the label's directory if it is a session directory directly under
// root ("" otherwise: a label never makes an adapter touch another path).
func OwnDir(root, label string) string {
	if label == "" || !filepath.IsAbs(label) || filepath.Clean(label) != label || filepath.Dir(label) != filepath.Clean(root) {
		return ""
	}
	if checkDirName(filepath.Base(label)) != nil {
		return ""
	}
	return label
}

// maxDirName bounds a session directory's name: the runtime's name of the session's
// sandbox, which holds the run ID (port.MaxRunIDLen bytes at most) between a prefix and
// a random suffix.
const maxDirName = 128

// checkDirName checks a session directory's name: the run ID's alphabet (no
// separator, no dot-dot) and at most maxDirName bytes. Errors wrap
// port.ErrInvalidSpec.
func checkDirName(name string) error {
	if name == "" || len(name) > maxDirName {
		return port.Invalidf("session directory name %q is empty or over %d bytes", name, maxDirName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return port.Invalidf("session directory name %q has characters outside [A-Za-z0-9_.-] or does not start with a letter or digit", name)
		}
	}
	return nil
}

// Keep reports whether Sweep must keep a resource with these labels given cutoff: a
// session is kept while its last heartbeat is after cutoff (falling back to its
// creation time when it has none); anything else by its creation time. root is the
// adapter's session root.
func Keep(root string, lbls map[string]string, cutoff time.Time) bool {
	if lbls[port.LabelKind] == port.KindSession {
		if d := OwnDir(root, lbls[port.LabelSessionDir]); d != "" {
			if t, err := LastHeartbeat(d); err == nil {
				return t.After(cutoff)
			}
		}
	}
	t, err := time.Parse(time.RFC3339Nano, lbls[port.LabelCreatedAt])
	return err == nil && t.After(cutoff)
}

// Stale reports whether a runtime on this host sweeps a resource of owner with
// these labels given cutoff: Keep does not keep it, and its run's lease is not held
// (a run whose host still refreshes its lease is live, whatever its age).
func Stale(root, owner string, lbls map[string]string, cutoff time.Time) bool {
	return !Keep(root, lbls, cutoff) && !runlease.Held(runlease.DefaultRoot(), owner, lbls[port.LabelRunID])
}

// RemoveDir removes a session's host directory if it lies under root. NotFound is
// success.
func RemoveDir(root, dir string) error {
	if OwnDir(root, dir) == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Labels returns the session labels (added to the usual resource labels).
func Labels(spec port.SessionSpec, dir string, deadline time.Time) map[string]string {
	ports := make([]string, len(spec.Expose))
	for i, p := range spec.Expose {
		ports[i] = strconv.Itoa(p)
	}
	return map[string]string{
		port.LabelSessionDir: dir,
		port.LabelExpose:     strings.Join(ports, ","),
		port.LabelLogLimit:   strconv.Itoa(spec.LogLimit),
		port.LabelDeadline:   deadline.UTC().Format(time.RFC3339Nano),
		port.LabelUser:       spec.User,
		port.LabelWorkspace:  spec.WorkspaceDir,
	}
}

// Meta is what a handle needs, read back from the labels by Attach.
type Meta struct {
	ID, RunID string
	Dir       string
	Workspace string
	Ports     []int
	LogLimit  int
	Deadline  time.Time
	User      string
	// Created is when the session's sandbox was created: its result's Duration runs
	// from then to the exit.
	Created time.Time
}

// ParseLabels reads a session's labels back, checking them as the spec was checked:
// labels are host-written, but a sandbox's runtime record is not where trust starts.
// Errors wrap port.ErrNotFound when the labels are not those of a session of owner
// under root.
func ParseLabels(owner, root string, lbls map[string]string) (Meta, error) {
	var m Meta
	if lbls[port.LabelOwner] != owner || lbls[port.LabelKind] != port.KindSession {
		return m, fmt.Errorf("%w: not a session of owner %q", port.ErrNotFound, owner)
	}
	m.RunID = lbls[port.LabelRunID]
	if err := port.ValidateRunID(m.RunID); err != nil {
		return m, fmt.Errorf("%w: bad run id label", port.ErrNotFound)
	}
	if m.Dir = OwnDir(root, lbls[port.LabelSessionDir]); m.Dir == "" {
		return m, fmt.Errorf("%w: session directory %q is not under %s", port.ErrNotFound, lbls[port.LabelSessionDir], root)
	}
	if w := lbls[port.LabelWorkspace]; w != "" {
		if !path.IsAbs(w) {
			return m, fmt.Errorf("%w: bad workspace label", port.ErrNotFound)
		}
		m.Workspace = w
	}
	if e := lbls[port.LabelExpose]; e != "" {
		for _, s := range strings.Split(e, ",") {
			p, err := strconv.Atoi(s)
			if err != nil || p < 1 || p > 65535 {
				return m, fmt.Errorf("%w: bad expose label", port.ErrNotFound)
			}
			m.Ports = append(m.Ports, p)
		}
	}
	m.LogLimit, _ = strconv.Atoi(lbls[port.LabelLogLimit])
	if m.LogLimit <= 0 {
		m.LogLimit = port.DefaultLogLimit
	}
	m.Deadline, _ = time.Parse(time.RFC3339Nano, lbls[port.LabelDeadline])
	m.Created, _ = time.Parse(time.RFC3339Nano, lbls[port.LabelCreatedAt])
	m.User = lbls[port.LabelUser]
	if m.User == "" {
		m.User = port.DefaultUser
	}
	return m, nil
}

// Dial connects to the socket of port in the session directory dir without following a
// link: the socket file is opened with O_PATH|O_NOFOLLOW, checked to be a socket, and
// connected to through /proc/self/fd (the sandbox can write the directory, and would
// otherwise point the host's connection at any socket on the host).
func Dial(ctx context.Context, dir string, p int) (net.Conn, error) {
	dfd, err := unix.Open(ExposeDir(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("expose dir: %w", err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, SocketName(p), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: socket of port %d: %v", port.ErrUnavailable, p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("socket of port %d: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%w: %s is not a socket (mode %o); refusing to dial", port.ErrInvalidSpec, SocketName(p), st.Mode)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("%w: port %d: %v", port.ErrUnavailable, p, err)
	}
	return c, nil
}

// WaitSockets waits until every port's socket exists in dir, until ctx ends or done
// closes (the sandbox exited first).
func WaitSockets(ctx context.Context, dir string, ports []int, done <-chan struct{}) error {
	delay := 5 * time.Millisecond
	for {
		missing := 0
		for _, p := range ports {
			fi, err := os.Lstat(filepath.Join(ExposeDir(dir), SocketName(p)))
			if err != nil || fi.Mode().Type() != fs.ModeSocket {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the exposed ports' sockets: %w", context.Cause(ctx))
		case <-done:
			return errors.New("the sandbox exited before its exposed ports' sockets appeared")
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// ReadFile reads name under the workspace through os.Root (no link leads out), at most
// max bytes (port.DefaultMaxReadFile when max is not positive).
func ReadFile(workspace, name string, max int64) ([]byte, error) {
	r, err := openRoot(workspace)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// O_NONBLOCK: a FIFO the agent planted must not block the host's open.
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, port.Invalidf("%s is not a regular file", name)
	}
	if max > 0 && fi.Size() > max {
		return nil, port.Invalidf("%s is %d bytes, over the limit of %d", name, fi.Size(), max)
	}
	if max <= 0 {
		max = port.DefaultMaxReadFile
	}
	buf, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) > max {
		return nil, port.Invalidf("%s grew over the limit of %d bytes", name, max)
	}
	return buf, nil
}

// WriteFile writes name under the workspace through os.Root, creating its parents,
// replacing a file in place (never following a link out).
func WriteFile(workspace, name string, data []byte, perm fs.FileMode) error {
	r, err := openRoot(workspace)
	if err != nil {
		return err
	}
	defer r.Close()
	if d := path.Dir(filepath.ToSlash(name)); d != "." {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return r.WriteFile(name, data, perm)
}

func openRoot(workspace string) (*os.Root, error) {
	if workspace == "" {
		return nil, port.Invalidf("the session has no workspace")
	}
	return os.OpenRoot(workspace)
}

func parseUser(u string) (int, int) {
	a, b, ok := strings.Cut(u, ":")
	uid, _ := strconv.Atoi(a)
	gid := uid
	if ok {
		gid, _ = strconv.Atoi(b)
	}
	return uid, gid
}
