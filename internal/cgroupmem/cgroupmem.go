// Package cgroupmem samples a sandbox's memory cgroup from the host while it runs:
// limit-hit and OOM events, peak usage, and memory pressure (PSI) stall times, for
// port.RunResult.Memory. It reads the cgroup of a process in the sandbox (the
// runtime's init) from /proc/<pid>/cgroup, on cgroup v2 and on v1 (with PSI from the
// unified hierarchy a hybrid host mounts at /sys/fs/cgroup/unified).
//
// The runners sample periodically because the cgroup vanishes with the container:
// the last sample before the end is what a run's result reports.
package cgroupmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Root is where cgroup file systems are mounted.
var Root = "/sys/fs/cgroup"

// Paths are the cgroup directories of one process.
type Paths struct {
	// V2 is the unified hierarchy's directory (v2, or a hybrid host's unified
	// mount); empty if none.
	V2 string
	// V1Memory is the v1 memory controller's directory; empty on v2.
	V1Memory string
}

// ForPID resolves the cgroup directories of pid from /proc/<pid>/cgroup.
func ForPID(pid int) (Paths, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return Paths{}, false
	}
	var p Paths
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || strings.Contains(parts[2], "..") {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			for _, base := range []string{Root, filepath.Join(Root, "unified")} {
				dir := filepath.Join(base, parts[2])
				if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil && isCgroup2(base) {
					p.V2 = dir
					break
				}
			}
		case hasController(parts[1], "memory"):
			p.V1Memory = filepath.Join(Root, "memory", parts[2])
		}
	}
	return p, p.V2 != "" || p.V1Memory != ""
}

// isCgroup2 tells the unified hierarchy's mount (it has cgroup.controllers, or
// cgroup.pressure on a hybrid host's unified mount) from v1 ones.
func isCgroup2(base string) bool {
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		if _, err := os.Stat(filepath.Join(base, f)); err == nil {
			return true
		}
	}
	return false
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// Read samples the cgroup once; ok is false when nothing could be read (the cgroup is
// gone).
func (p Paths) Read() (m port.MemoryPressure, ok bool) {
	if p.V1Memory != "" {
		if v, found := readUint(filepath.Join(p.V1Memory, "memory.limit_in_bytes")); found {
			m.LimitBytes, ok = v, true
		}
		m.PeakBytes, _ = readUint(filepath.Join(p.V1Memory, "memory.max_usage_in_bytes"))
		m.LimitHits, _ = readUint(filepath.Join(p.V1Memory, "memory.failcnt"))
		m.OOMKills, _ = readKey(filepath.Join(p.V1Memory, "memory.oom_control"), "oom_kill")
	}
	if p.V2 != "" {
		if p.V1Memory == "" {
			if v, found := readUint(filepath.Join(p.V2, "memory.max")); found {
				m.LimitBytes, ok = v, true
			}
			m.PeakBytes, _ = readUint(filepath.Join(p.V2, "memory.peak"))
			m.LimitHits, _ = readKey(filepath.Join(p.V2, "memory.events"), "max")
			m.OOMKills, _ = readKey(filepath.Join(p.V2, "memory.events"), "oom_kill")
		}
		if some, full, avg, found := readPSI(filepath.Join(p.V2, "memory.pressure")); found {
			m.SomeStall, m.FullStall, m.FullAvg10, ok = some, full, avg, true
		}
	}
	return m, ok
}

func readFile(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64<<10 {
		return nil, false
	}
	return b, true
}

func readUint(path string) (uint64, bool) {
	b, ok := readFile(path)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// readKey reads "key value" from a flat-keyed cgroup file.
func readKey(path, key string) (uint64, bool) {
	b, ok := readFile(path)
	if !ok {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(line, " ")
		if found && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readPSI parses "some avg10=.. avg60=.. avg300=.. total=<µs>" and the "full" line.
func readPSI(path string) (some, full time.Duration, fullAvg10 float64, ok bool) {
	b, found := readFile(path)
	if !found {
		return 0, 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var total time.Duration
		var avg10 float64
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "total":
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					total, ok = time.Duration(n)*time.Microsecond, true
				}
			case "avg10":
				avg10, _ = strconv.ParseFloat(v, 64)
			}
		}
		switch f[0] {
		case "some":
			some = total
		case "full":
			full, fullAvg10 = total, avg10
		}
	}
	return some, full, fullAvg10, ok
}

// Sampler samples a cgroup every interval until Stop, keeping the last sample that
// could be read.
type Sampler struct {
	mu       sync.Mutex
	paths    Paths
	last     *port.MemoryPressure
	n        int
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Start samples the cgroup of the process pid() returns (called in the sampler's
// goroutine, so a runner can look the process up off its critical path; a pid of 0
// or less ends the sampler) every interval.
func Start(pid func() int, interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		p := pid()
		if p <= 0 {
			return
		}
		paths, ok := ForPID(p)
		if !ok {
			return
		}
		s.mu.Lock()
		s.paths = paths
		s.mu.Unlock()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.Sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Sample reads the cgroup now (before a kill, say); safe to call any time.
func (s *Sampler) Sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paths == (Paths{}) {
		return
	}
	m, ok := s.paths.Read()
	if !ok {
		return
	}
	s.n++
	s.last = &m
}

// Stop ends the sampling and returns the run's pressure: the last sample (the
// cgroup is the container's own, made for the run, so its totals are the run's);
// nil when nothing could be read.
func (s *Sampler) Stop() *port.MemoryPressure {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	m := *s.last
	m.Samples = s.n
	return &m
}

// Hint adds to a timeout's cause that the sandbox spent the run stalled on memory,
// when it did (port.MemoryPressure.Thrashing): a limit too small can make a process
// thrash instead of being OOM-killed, and the timeout alone would not say why.
func Hint(cause error, m *port.MemoryPressure, d time.Duration) error {
	if !m.Thrashing(d) {
		return cause
	}
	return fmt.Errorf("%w; the sandbox was stalled on memory for %v of %v (%s): its memory limit looks too small",
		cause, m.FullStall.Round(time.Millisecond), d.Round(time.Millisecond), m)
}
