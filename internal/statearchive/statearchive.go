// Package statearchive saves a directory an agent wrote (a workspace, a state
// directory) as a tar stream, and restores such a stream into an empty directory,
// treating both sides as hostile: the tree is read through an os.Root without
// following any link, and a stream is restored only if it holds nothing but
// directories and regular files with local names, within limits on sizes, entries
// and depth; anything else refuses the whole stream.
//
// It serves hibernated sessions (the facade's Session.Hibernate and Sandbox.Resume):
// the saved state comes back into a fresh sandbox, possibly on another host, from a
// store the agent's earlier self filled.
package statearchive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Limits bound what is saved and restored. Zero fields take the defaults.
type Limits struct {
	// MaxBytes bounds the sum of the files' sizes (default 8 GiB).
	MaxBytes int64
	// MaxFileBytes bounds one file (default 2 GiB).
	MaxFileBytes int64
	// MaxEntries bounds the number of files and directories (default 1,000,000).
	MaxEntries int
	// MaxDepth bounds the number of path components (default 128).
	MaxDepth int
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 8 << 30
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = 2 << 30
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1_000_000
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 128
	}
	return l
}

// maxSkippedNames bounds Report.Skipped.
const maxSkippedNames = 100

// Report says what a Write saved or an Extract restored.
type Report struct {
	Files, Dirs int
	Bytes       int64
	// Skipped names what Write left out because it is not a directory or a regular
	// file (a link, a FIFO, a socket, a device), at most 100 names; SkippedCount
	// counts them all. Excluded paths are not counted.
	Skipped      []string
	SkippedCount int
}

func (r *Report) skip(name, why string) {
	r.SkippedCount++
	if len(r.Skipped) < maxSkippedNames {
		r.Skipped = append(r.Skipped, name+" ("+why+")")
	}
}

// Error is a refused saved state: an entry that is not a directory or a regular
// file, a name that leaves the directory, a limit passed. It wraps
// port.ErrInvalidSpec.
type Error struct {
	// Name is the entry's name as the stream gave it (or the tree's path).
	Name string
	// Reason says which rule it broke.
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("saved state refused: %q: %s", e.Name, e.Reason)
}

// Unwrap returns port.ErrInvalidSpec.
func (e *Error) Unwrap() error { return port.ErrInvalidSpec }

// Write writes the tree under dir to w as a tar stream: directories and regular
// files, read through an os.Root with every open refusing a link (O_NOFOLLOW) and a
// FIFO never blocking (O_NONBLOCK). Anything else is skipped and reported; paths
// under exclude (slash-separated, relative to dir, each component a path.Match
// pattern) are left out silently. The limits hold here too:
// a tree beyond them is refused with an *Error (nothing of it is worth restoring
// half).
func Write(w io.Writer, dir string, exclude []string, lim Limits) (Report, error) {
	lim = lim.WithDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Report{}, err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	wr := &writer{root: root, tw: tw, lim: lim, exclude: cleanAll(exclude)}
	if err := wr.dir(".", 0); err != nil {
		return wr.rep, err
	}
	return wr.rep, tw.Close()
}

type writer struct {
	root    *os.Root
	tw      *tar.Writer
	lim     Limits
	exclude []string
	rep     Report
	entries int
}

func cleanAll(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p = path.Clean(strings.TrimPrefix(p, "/")); p != "." && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// excluded reports whether name is, or is under, an excluded path. Each component
// of an exclusion is a path.Match pattern ("agents/*/agent/auth-profiles.json").
func (w *writer) excluded(name string) bool {
	parts := strings.Split(name, "/")
	for _, e := range w.exclude {
		pat := strings.Split(e, "/")
		if len(pat) > len(parts) {
			continue
		}
		match := true
		for i, p := range pat {
			if ok, err := path.Match(p, parts[i]); err != nil || !ok {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func (w *writer) dir(name string, depth int) error {
	if depth > w.lim.MaxDepth {
		return &Error{Name: name, Reason: fmt.Sprintf("deeper than %d directories", w.lim.MaxDepth)}
	}
	f, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		child := e.Name()
		if name != "." {
			child = name + "/" + e.Name()
		}
		if w.excluded(child) {
			continue
		}
		if err := w.entry(child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) count(name string) error {
	if w.entries++; w.entries > w.lim.MaxEntries {
		return &Error{Name: name, Reason: fmt.Sprintf("more than %d entries", w.lim.MaxEntries)}
	}
	return nil
}

func (w *writer) entry(name string, depth int) error {
	fi, err := w.root.Lstat(name)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := w.count(name); err != nil {
			return err
		}
		if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
			return err
		}
		w.rep.Dirs++
		return w.dir(name, depth)
	case fi.Mode().IsRegular():
		return w.file(name)
	default:
		w.rep.skip(name, kind(fi.Mode()))
		return nil
	}
}

func (w *writer) file(name string) error {
	f, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			w.rep.skip(name, "a symbolic link")
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		w.rep.skip(name, kind(fi.Mode()))
		return nil
	}
	if err := w.count(name); err != nil {
		return err
	}
	if fi.Size() > w.lim.MaxFileBytes {
		return &Error{Name: name, Reason: fmt.Sprintf("%d bytes, over the limit of %d per file", fi.Size(), w.lim.MaxFileBytes)}
	}
	if w.rep.Bytes+fi.Size() > w.lim.MaxBytes {
		return &Error{Name: name, Reason: fmt.Sprintf("over the limit of %d bytes in all", w.lim.MaxBytes)}
	}
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	// The sandbox is gone when the state is saved, so the size holds; a file that
	// shrank anyway is padded by the tar writer's error, not silently.
	n, err := io.Copy(w.tw, io.LimitReader(f, fi.Size()))
	if err != nil {
		return err
	}
	if n != fi.Size() {
		return fmt.Errorf("%s changed while it was saved (%d of %d bytes)", name, n, fi.Size())
	}
	w.rep.Files++
	w.rep.Bytes += n
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file"
	}
}

// Owner is who restored files belong to: the sandbox's user. A negative UID leaves
// them the host process's.
type Owner struct{ UID, GID int }

// Extract restores a stream written by Write into dir, which must be an existing,
// empty directory. The stream is hostile input: every entry must be a directory or
// a regular file (a link of either kind, a FIFO, a device, a sparse file refuse the
// stream), with a local name (no "..", no absolute path) at most MaxDepth deep,
// appearing once; each file within MaxFileBytes and all within MaxBytes and
// MaxEntries. Modes keep the permission bits only (no setuid, setgid or sticky).
// Everything is created through an os.Root, exclusively (a name given twice
// refuses the stream). Restored entries are given to owner (when this process may
// change owners; otherwise they are made writable by everyone, as NewWorkspace does).
//
// On any error, what was restored is removed, leaving dir empty. A refusal is an
// *Error (wrapping port.ErrInvalidSpec).
func Extract(r io.Reader, dir string, owner Owner, lim Limits) (rep Report, err error) {
	lim = lim.WithDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return rep, err
	}
	defer root.Close()
	if err := mustBeEmpty(root); err != nil {
		return rep, err
	}
	defer func() {
		if err != nil {
			emptyDir(root)
		}
	}()
	// Headers and padding are bounded too: a stream of empty blocks ends here.
	r = io.LimitReader(r, lim.MaxBytes+int64(lim.MaxEntries+16)*3*512+1<<20)
	tr := tar.NewReader(r)
	chown := owner.UID >= 0
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirTimes []dirTime
	entries := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return rep, &Error{Name: "", Reason: "not a readable tar stream: " + err.Error()}
		}
		name, err := localName(h.Name, lim.MaxDepth)
		if err != nil {
			return rep, err
		}
		if entries++; entries > lim.MaxEntries {
			return rep, &Error{Name: h.Name, Reason: fmt.Sprintf("more than %d entries", lim.MaxEntries)}
		}
		perm := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if name == "." {
				continue
			}
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return rep, refusal(h.Name, err)
			}
			if err := root.Mkdir(name, perm|0o700); err != nil {
				return rep, refusal(h.Name, err)
			}
			rep.Dirs++
			chown = give(root, name, owner, chown, true)
			dirTimes = append(dirTimes, dirTime{name, h.ModTime})
		case tar.TypeReg:
			if name == "." {
				return rep, &Error{Name: h.Name, Reason: "a file in place of the directory itself"}
			}
			if h.Size < 0 || h.Size > lim.MaxFileBytes {
				return rep, &Error{Name: h.Name, Reason: fmt.Sprintf("%d bytes, over the limit of %d per file", h.Size, lim.MaxFileBytes)}
			}
			if rep.Bytes+h.Size > lim.MaxBytes {
				return rep, &Error{Name: h.Name, Reason: fmt.Sprintf("over the limit of %d bytes in all", lim.MaxBytes)}
			}
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return rep, refusal(h.Name, err)
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm|0o600)
			if err != nil {
				return rep, refusal(h.Name, err)
			}
			n, cerr := io.Copy(f, tr)
			if err := errors.Join(cerr, f.Close()); err != nil {
				return rep, err
			}
			if n != h.Size {
				return rep, &Error{Name: h.Name, Reason: fmt.Sprintf("%d of %d bytes", n, h.Size)}
			}
			rep.Files++
			rep.Bytes += n
			chown = give(root, name, owner, chown, false)
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		default:
			return rep, &Error{Name: h.Name, Reason: typeName(h.Typeflag) + ": only directories and regular files are restored"}
		}
	}
	for i := len(dirTimes) - 1; i >= 0; i-- {
		_ = root.Chtimes(dirTimes[i].name, dirTimes[i].t, dirTimes[i].t)
	}
	return rep, nil
}

// localName checks an entry's name: relative, without "..", at most depth deep.
func localName(n string, depth int) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) || strings.HasPrefix(n, "/") {
		return "", &Error{Name: n, Reason: "not a relative name"}
	}
	c := path.Clean(n)
	if c != "." && !fs.ValidPath(c) {
		return "", &Error{Name: n, Reason: "leaves the directory"}
	}
	if strings.Count(c, "/")+1 > depth {
		return "", &Error{Name: n, Reason: fmt.Sprintf("deeper than %d", depth)}
	}
	return c, nil
}

// refusal turns an error creating name into a refusal where it is the stream's
// doing (a name given twice, a file under a file); else it stays as is.
func refusal(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrExist):
		return &Error{Name: name, Reason: "appears twice, or in place of or under an entry of another kind"}
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP):
		return &Error{Name: name, Reason: "under an entry that is not a directory"}
	}
	return err
}

// give hands name to owner; where this process cannot change owners it opens
// the entry's mode to everyone instead (and stops trying to chown). It returns
// whether chown is still worth trying.
func give(root *os.Root, name string, owner Owner, chown, dir bool) bool {
	if chown {
		if err := root.Lchown(name, owner.UID, owner.GID); err == nil {
			return true
		}
	}
	if owner.UID < 0 {
		return false
	}
	mode := fs.FileMode(0o666)
	if dir {
		mode = 0o777
	}
	if fi, err := root.Lstat(name); err == nil {
		_ = root.Chmod(name, fi.Mode().Perm()|mode)
	}
	return false
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "a symbolic link"
	case tar.TypeLink:
		return "a hard link"
	case tar.TypeFifo:
		return "a FIFO"
	case tar.TypeChar, tar.TypeBlock:
		return "a device"
	case tar.TypeGNUSparse:
		return "a sparse file"
	default:
		return fmt.Sprintf("an entry of type %q", t)
	}
}

func mustBeEmpty(root *os.Root) error {
	f, err := root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && err != io.EOF {
		return err
	}
	if len(names) > 0 {
		return port.Invalidf("the directory to restore into is not empty (it holds %q)", names[0])
	}
	return nil
}

// emptyDir removes everything under root (what a failed Extract restored).
func emptyDir(root *os.Root) {
	f, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, n := range names {
		_ = root.RemoveAll(n)
	}
}
