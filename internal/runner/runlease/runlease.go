// Package runlease keeps the lease of a live run: a file per owner and run whose
// modification time the host running it refreshes (like a session's heartbeat), so
// that a Sweep in another process, whatever grace it is given, leaves a run alone
// while its host is alive, and takes it once the host has been gone for TTL.
//
// The lease is a file on the host's file system, so it protects runs from sweeps on
// the same machine (the runtime daemons are local too). It names its holder (process
// id and start time), so a holder that died (killed mid-run) releases it at once for
// a sweeper in the same process namespace; one that cannot see the holder relies on
// TTL.
package runlease

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Interval is how often a held lease is refreshed; TTL is how long a lease counts as
// held after its last refresh (three missed refreshes: the host is gone).
const (
	Interval = 5 * time.Second
	TTL      = 3 * Interval
)

// DefaultRoot is where leases live: one directory per owner, one file per run.
func DefaultRoot() string { return filepath.Join(os.TempDir(), "agentsandbox-runs") }

// Lease is a held run lease. Release it when the run's resources are gone (or their
// removal is handed to the background: a Sweep may then take what is left).
type Lease struct {
	path string
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

func path(root, owner, runID string) (string, error) {
	for _, s := range []string{owner, runID} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
			return "", fmt.Errorf("runlease: %q cannot name a lease", s)
		}
	}
	return filepath.Join(root, owner, runID), nil
}

// Hold takes runID's lease for owner under root and refreshes it every Interval
// until Release.
func Hold(root, owner, runID string) (*Lease, error) {
	p, err := path(root, owner, runID)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("runlease: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscallNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("runlease: %w", err)
	}
	_, err = fmt.Fprintf(f, "%d %s\n", os.Getpid(), startTime(os.Getpid()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("runlease: %w", err)
	}
	l := &Lease{path: p, stop: make(chan struct{}), done: make(chan struct{})}
	go l.refresh()
	return l, nil
}

func (l *Lease) refresh() {
	defer close(l.done)
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			now := time.Now()
			_ = os.Chtimes(l.path, now, now)
		case <-l.stop:
			return
		}
	}
}

// Release stops refreshing and removes the lease. It is idempotent.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		_ = os.Remove(l.path)
	})
}

// Held reports whether runID of owner has a lease refreshed within TTL under root.
func Held(root, owner, runID string) bool {
	p, err := path(root, owner, runID)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return true // unreadable: keep the run rather than remove a live one
		}
		return false
	}
	if !fi.Mode().IsRegular() || time.Since(fi.ModTime()) >= TTL {
		return false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return true
	}
	var pid int
	var start string
	if n, _ := fmt.Sscanf(string(b), "%d %s", &pid, &start); n < 1 || pid <= 0 {
		return true // no holder named: the TTL decides
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		if _, perr := os.Stat("/proc/self"); perr != nil {
			return true // no /proc here: the TTL decides
		}
		return false // the holder is gone
	}
	return start == "" || startTime(pid) == start
}

// startTime is a process's start time in clock ticks after boot (field 22 of
// /proc/PID/stat), which tells a live holder from a later process with its id; ""
// where there is no /proc.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces; it ends at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// Prune removes owner's leases under root that are no longer held (their holder died
// or stopped refreshing them), and returns how many. A sweeper calls it so that hosts
// killed mid-run leave no lease files behind.
func Prune(root, owner string) int {
	dir, err := path(root, owner, "x")
	if err != nil {
		return 0
	}
	ents, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() && !Held(root, owner, e.Name()) {
			if os.Remove(filepath.Join(root, owner, e.Name())) == nil {
				n++
			}
		}
	}
	return n
}
