// Package runlease keeps the leases of live runs, pool slots and attached sessions:
// one file per holder that the holder keeps locked (flock) for as long as it lives,
// so that a Sweep in another process, whatever grace it is given, leaves a run alone
// while its host is alive, and takes it as soon as the host is gone.
//
// Liveness is the kernel's: a lock is released when its holder dies, however it dies,
// and flock works across PID namespaces (a host in a container or under unshare) as
// long as both sides see the same file. Leases therefore live in one well-known
// directory per machine (DefaultRoot), never under the host's TMPDIR (a host with a
// private /tmp, systemd's PrivateTmp, would be invisible to a sweeper). The text in a
// lease file (holder's pid, hostname, kind, time) is for people; no sweeper decides on
// it.
//
// Layout: <root>/<owner>/<run id>/<holder>, one directory per run, so that several
// holders of one run (two handles of one session) never erase each other's lease.
package runlease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds of holders, recorded in the lease for people and tools.
const (
	KindRun     = "run"
	KindSlot    = "slot"
	KindSession = "session"
)

// DefaultRoot is where leases live when a runner is given no other root: a directory
// every process of the machine sees whatever its TMPDIR or private /tmp —
// /run/agentsandbox/leases as root, else $XDG_RUNTIME_DIR/agentsandbox/leases, else
// agentsandbox-leases-<uid> under the temporary directory.
func DefaultRoot() string {
	if os.Geteuid() == 0 {
		return "/run/agentsandbox/leases"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "agentsandbox", "leases")
	}
	return filepath.Join(os.TempDir(), "agentsandbox-leases-"+strconv.Itoa(os.Geteuid()))
}

// Lease is a held lease. Release it when what it protects is gone (or its removal is
// handed to the background: a Sweep may then take what is left).
type Lease struct {
	path string
	f    *os.File // open, locked: the lease
	once sync.Once
}

func checkName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") || strings.HasPrefix(s, ".") {
		return fmt.Errorf("runlease: %q cannot name a lease", s)
	}
	return nil
}

func runDir(root, owner, runID string) (string, error) {
	for _, s := range []string{owner, runID} {
		if err := checkName(s); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, owner, runID), nil
}

// Hold takes a lease of runID for owner under root, of kind (KindRun, KindSlot,
// KindSession), held until Release or the holder's death.
func Hold(root, owner, runID, kind string) (*Lease, error) {
	dir, err := runDir(root, owner, runID)
	if err != nil {
		return nil, err
	}
	// The lease is locked before it has its name: a sweeper never sees it unlocked.
	// A Prune may remove the run's directory between MkdirAll and the rename: retry.
	for attempt := 0; ; attempt++ {
		l, err := hold(root, dir, kind)
		if err == nil || attempt == 3 || !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				return nil, fmt.Errorf("runlease: %w", err)
			}
			return l, nil
		}
	}
}

func hold(root, dir, kind string) (*Lease, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	name := newHolder()
	tmp := filepath.Join(dir, "."+name)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscallNoFollow, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Lease, error) {
		f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := lock(f); err != nil {
		return fail(err)
	}
	host, _ := os.Hostname()
	if _, err := fmt.Fprintf(f, "pid=%d host=%s kind=%s since=%s\n", os.Getpid(), host, kind, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fail(err)
	}
	p := filepath.Join(dir, name)
	if err := os.Rename(tmp, p); err != nil {
		return fail(err)
	}
	return &Lease{path: p, f: f}, nil
}

func newHolder() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Release removes the lease and gives up its lock. It is idempotent, and a no-op on
// a nil Lease.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		_ = os.Remove(l.path)
		_ = os.Remove(filepath.Dir(l.path)) // the run's last lease: its directory (fails while others hold it)
		l.f.Close()                         // the lock goes with the file
	})
}

// Held reports whether runID of owner has a live holder under root. A lease that
// cannot be read counts as held: a sweeper keeps a run rather than remove a live one.
func Held(root, owner, runID string) bool {
	dir, err := runDir(root, owner, runID)
	if err != nil {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	for _, e := range ents {
		// A file being made (a dot name) counts too: it is locked before it is named.
		if e.Type().IsRegular() && alive(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}

// alive reports whether the lease file at p is locked by a live holder (or cannot be
// checked).
func alive(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return err != nil
	}
	free, err := tryLock(f)
	if err != nil {
		return true
	}
	if free {
		unlock(f)
	}
	return !free
}

// Info describes one lease file (List).
type Info struct {
	Owner, RunID string
	// Holder is the lease file's name in the run's directory.
	Holder string
	// Kind, PID, Host and Since are what the holder wrote (for people: the pid is in
	// the holder's PID namespace).
	Kind  string
	PID   int
	Host  string
	Since time.Time
	// Held says a live process holds it.
	Held bool
}

// List returns owner's leases under root, held or not.
func List(root, owner string) ([]Info, error) {
	if err := checkName(owner); err != nil {
		return nil, err
	}
	runs, err := subdirs(filepath.Join(root, owner))
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, run := range runs {
		dir := filepath.Join(root, owner, run)
		hs, _ := os.ReadDir(dir)
		for _, h := range hs {
			if !h.Type().IsRegular() || strings.HasPrefix(h.Name(), ".") {
				continue
			}
			p := filepath.Join(dir, h.Name())
			in := Info{Owner: owner, RunID: run, Holder: h.Name(), Held: alive(p)}
			in.read(p)
			out = append(out, in)
		}
	}
	return out, nil
}

// read fills the descriptive fields from the lease's text (best effort).
func (in *Info) read(p string) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return
	}
	defer f.Close()
	b := make([]byte, 512)
	n, _ := f.Read(b)
	for _, kv := range strings.Fields(string(b[:n])) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "pid":
			in.PID, _ = strconv.Atoi(v)
		case "host":
			in.Host = v
		case "kind":
			in.Kind = v
		case "since":
			in.Since, _ = time.Parse(time.RFC3339Nano, v)
		}
	}
}

// Owners returns the owners with a lease directory under root.
func Owners(root string) ([]string, error) { return subdirs(root) }

// subdirs returns the names of dir's directories that are valid names (none when dir
// does not exist): the owners under the root, the runs under an owner.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runlease: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && checkName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// staleTemp is how old a lease still being made (a dot file) must be before Prune
// takes it: its maker died between making and naming it.
const staleTemp = time.Minute

// Prune removes owner's lease files under root whose holder is gone, and the run
// directories left empty, and returns how many leases it removed. A sweeper calls it
// so that hosts killed mid-run leave no lease files behind.
func Prune(root, owner string) int {
	if checkName(owner) != nil {
		return 0
	}
	od := filepath.Join(root, owner)
	runs, err := subdirs(od)
	if err != nil {
		return 0
	}
	n := 0
	for _, run := range runs {
		dir := filepath.Join(od, run)
		hs, _ := os.ReadDir(dir)
		for _, h := range hs {
			if !h.Type().IsRegular() {
				continue
			}
			p := filepath.Join(dir, h.Name())
			if strings.HasPrefix(h.Name(), ".") {
				if fi, err := h.Info(); err == nil && time.Since(fi.ModTime()) > staleTemp && !alive(p) && os.Remove(p) == nil {
					n++
				}
				continue
			}
			if removeDead(p) {
				n++
			}
		}
		_ = os.Remove(dir) // empty only
	}
	_ = os.Remove(od)
	return n
}

// Dead returns the run IDs of owner's runs under root with a lease file no live holder
// has (its holder died), sorted: what a sweep lists before it removes them one by one
// with RemoveDead, so that a dry run and the sweep after it name the same leases.
func Dead(root, owner string) []string {
	ls, _ := List(root, owner)
	seen := map[string]bool{}
	var out []string
	for _, l := range ls {
		if !l.Held && !seen[l.RunID] {
			seen[l.RunID] = true
			out = append(out, l.RunID)
		}
	}
	sort.Strings(out)
	return out
}

// RemoveDead removes runID's lease files under root for owner whose holder is gone,
// and the run's directory if none is left. Leases a live holder has stay; nothing to
// remove is no error.
func RemoveDead(root, owner, runID string) error {
	dir, err := runDir(root, owner, runID)
	if err != nil {
		return err
	}
	hs, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("runlease: %w", err)
	}
	for _, h := range hs {
		if h.Type().IsRegular() && !strings.HasPrefix(h.Name(), ".") {
			removeDead(filepath.Join(dir, h.Name()))
		}
	}
	_ = os.Remove(dir) // empty only
	_ = os.Remove(filepath.Dir(dir))
	return nil
}

// ErrHeld is RemoveDeadHolder's refusal of a lease whose holder is alive.
var ErrHeld = errors.New("runlease: the lease is held")

// RemoveDeadHolder removes the one lease file i names if its holder is gone (a
// sweep's dry run listed it from List), and the run's directory if none is left.
func RemoveDeadHolder(root string, i Info) error {
	dir, err := runDir(root, i.Owner, i.RunID)
	if err != nil {
		return err
	}
	if err := checkName(i.Holder); err != nil {
		return err
	}
	p := filepath.Join(dir, i.Holder)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !removeDead(p) {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%w: %s", ErrHeld, p)
	}
	_ = os.Remove(dir) // empty only
	_ = os.Remove(filepath.Dir(dir))
	return nil
}

// removeDead removes the lease at p if no one holds it: under its lock, so a holder
// cannot be taking it meanwhile, and only if p is still that file.
func removeDead(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	free, err := tryLockExclusive(f)
	if err != nil || !free {
		return false
	}
	defer unlock(f)
	a, err1 := f.Stat()
	b, err2 := os.Lstat(p)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return false
	}
	return os.Remove(p) == nil
}
