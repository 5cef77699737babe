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
	return parse(b)
}

// parse resolves the directories a /proc/<pid>/cgroup file names. Only a cgroup of
// the sandbox's own is kept: a runtime that places its process in a memory cgroup
// but leaves it in a shared unified one (gVisor's runsc on a hybrid host stays in
// "0::/") would report the whole machine's stall as the run's, so a unified path
// that is the root, or differs from the memory controller's, is dropped.
func parse(b []byte) (Paths, bool) {
	var p Paths
	var v2Rel, memRel string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || strings.Contains(parts[2], "..") {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if parts[2] == "/" {
				continue
			}
			for _, base := range []string{Root, filepath.Join(Root, "unified")} {
				dir := filepath.Join(base, parts[2])
				if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil && isCgroup2(base) {
					p.V2, v2Rel = dir, parts[2]
					break
				}
			}
		case hasController(parts[1], "memory"):
			p.V1Memory, memRel = filepath.Join(Root, "memory", parts[2]), parts[2]
		}
	}
	if p.V1Memory != "" && v2Rel != memRel {
		p.V2 = ""
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
// gone). A cgroup removed while it is read gives no partial sample: its event counter
// is read first and its limit last, and both must be there.
func (p Paths) Read() (m port.MemoryPressure, ok bool) {
	if p == (Paths{}) {
		return m, false
	}
	var events, limit bool
	if p.V1Memory != "" {
		m.LimitHits, events = readUint(filepath.Join(p.V1Memory, "memory.failcnt"))
		m.OOMKills, _ = readKey(filepath.Join(p.V1Memory, "memory.oom_control"), "oom_kill")
		m.PeakBytes, _ = readUint(filepath.Join(p.V1Memory, "memory.max_usage_in_bytes"))
	}
	if p.V2 != "" {
		if p.V1Memory == "" {
			var b []byte
			if b, events = readFile(filepath.Join(p.V2, "memory.events")); events {
				m.LimitHits, _ = keyIn(b, "max")
				m.OOMKills, _ = keyIn(b, "oom_kill")
			}
			m.PeakBytes, _ = readUint(filepath.Join(p.V2, "memory.peak"))
		}
		if some, full, avg, found := readPSI(filepath.Join(p.V2, "memory.pressure")); found {
			m.SomeStall, m.FullStall, m.FullAvg10 = some, full, avg
		}
	}
	limitFile := filepath.Join(p.V2, "memory.max") // "max" when unlimited: 0
	if p.V1Memory != "" {
		limitFile = filepath.Join(p.V1Memory, "memory.limit_in_bytes")
	}
	if b, found := readFile(limitFile); found {
		m.LimitBytes, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		limit = true
	}
	return m, events && limit
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
	return keyIn(b, key)
}

// keyIn reads "key value" from a flat-keyed cgroup file's content.
func keyIn(b []byte, key string) (uint64, bool) {
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
	// base is the claim's sample of a pooled sandbox (StartClaimed): the counters
	// before it were the slot's, not the run's.
	base *port.MemoryPressure
	// peak is a v2 memory.peak opened and reset at the claim: it reads the peak since.
	peak *os.File
}

// Start samples the cgroup of the process pid() returns (called in the sampler's
// goroutine, so a runner can look the process up off its critical path; a pid of 0
// or less ends the sampler) every interval.
func Start(pid func() int, interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		p := pid()
		if p <= 0 {
			close(s.done)
			return
		}
		paths, ok := ForPID(p)
		if !ok {
			close(s.done)
			return
		}
		s.mu.Lock()
		s.paths = paths
		s.mu.Unlock()
		s.loop(interval)
	}()
	return s
}

// StartClaimed samples the cgroup at paths every interval for a run that claimed a
// sandbox which already ran (a pooled slot, perhaps with a pre-booted runtime): the
// cgroup's event counters and stall times count from the slot's creation, so Stop
// reports them as the difference from a sample taken now, and ClaimBytes as the usage
// now. The peak is reset now where the kernel lets the host do so (cgroup v1's
// memory.max_usage_in_bytes; v2's memory.peak, per open file, from Linux 6.12), so it
// is the run's (never below the usage at the claim); elsewhere it is the slot's since
// its creation, the pre-boot included. Resolve paths when the slot is made: this
// reads a few small files and does no lookup.
func StartClaimed(paths Paths, interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{}), paths: paths}
	if paths == (Paths{}) {
		close(s.done)
		return s
	}
	base, ok := paths.Read()
	if !ok {
		close(s.done) // the cgroup is gone: nothing to report
		return s
	}
	base.ClaimBytes = paths.usage()
	s.base = &base
	first := base
	s.last, s.n = &first, 1 // the claim's sample, should the cgroup go before the next
	s.peak = paths.resetPeak()
	go s.loop(interval)
	return s
}

// firstSample is the wait before the second sample; it doubles up to the interval,
// so a short run (or a quick climb to the limit) is seen too, for a few more reads.
const firstSample = 10 * time.Millisecond

// loop samples until Stop.
func (s *Sampler) loop(interval time.Duration) {
	defer close(s.done)
	wait := min(firstSample, interval)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		s.Sample()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		wait = min(2*wait, interval)
		t.Reset(wait)
	}
}

// Ended completes m, sampled until a run ended OOM-killed by the runtime's account
// (oomKilled): a cgroup removed with its container before the last sample (Docker
// removes it at the exit) kept the kill from the samples, but the kernel made at
// least one.
func Ended(m *port.MemoryPressure, oomKilled bool) *port.MemoryPressure {
	if m != nil && oomKilled && m.OOMKills == 0 {
		m.OOMKills = 1
	}
	return m
}

// usage is the cgroup's memory use now (0 when it cannot be read).
func (p Paths) usage() uint64 {
	if p.V1Memory != "" {
		v, _ := readUint(filepath.Join(p.V1Memory, "memory.usage_in_bytes"))
		return v
	}
	v, _ := readUint(filepath.Join(p.V2, "memory.current"))
	return v
}

// resetPeak resets the cgroup's peak usage to its usage now, where the kernel allows:
// v1's memory.max_usage_in_bytes is reset by writing 0 (for every reader); v2's
// memory.peak (Linux 6.12+) only for the open file written to, returned to read from.
// The peak stays the cgroup's since its creation otherwise.
func (p Paths) resetPeak() *os.File {
	if p.V1Memory != "" {
		_ = os.WriteFile(filepath.Join(p.V1Memory, "memory.max_usage_in_bytes"), []byte("0"), 0)
		return nil
	}
	f, err := os.OpenFile(filepath.Join(p.V2, "memory.peak"), os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	if _, err := f.Write([]byte("reset\n")); err != nil {
		_ = f.Close()
		return nil
	}
	return f
}

// readPeak reads a reset v2 memory.peak.
func readPeak(f *os.File) (uint64, bool) {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b[:n])), 10, 64)
	return v, err == nil
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
	if s.peak != nil {
		if v, ok := readPeak(s.peak); ok {
			m.PeakBytes = v
		}
	}
	s.n++
	s.last = &m
}

// Stop ends the sampling and returns the run's pressure: the last sample (the
// cgroup is the container's own, made for the run, so its totals are the run's; for
// StartClaimed, the change since the claim); nil when nothing could be read.
func (s *Sampler) Stop() *port.MemoryPressure {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.Sample() // the end of the run, if the cgroup is still there
		s.mu.Lock()
		if s.peak != nil {
			_ = s.peak.Close()
			s.peak = nil
		}
		s.mu.Unlock()
	})
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	m := *s.last
	m.Samples = s.n
	if b := s.base; b != nil {
		m.LimitHits = sub(m.LimitHits, b.LimitHits)
		m.OOMKills = sub(m.OOMKills, b.OOMKills)
		m.SomeStall = time.Duration(sub(uint64(m.SomeStall), uint64(b.SomeStall)))
		m.FullStall = time.Duration(sub(uint64(m.FullStall), uint64(b.FullStall)))
		m.ClaimBytes = b.ClaimBytes
	}
	return &m
}

// sub is a-b, or 0 when a counter went backwards.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
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
