package port

import (
	"fmt"
	"time"
)

// MemoryPressure is what a sandbox's memory cgroup reported while the run went on,
// sampled by the host (the sandbox cannot write it). It tells a run that was short of
// memory from one that was slow: a process at its memory limit is not always
// OOM-killed; it can thrash instead (the kernel evicting and re-reading its code
// pages), making no progress until its timeout. Zero fields were not available
// (cgroup v1 has no per-cgroup limit-hit events, and a kernel without PSI has no
// stall times; nor has a runtime that leaves the sandbox in a shared unified cgroup,
// such as gVisor's runsc on a host with both cgroup versions mounted: the stall times
// there would be other processes').
type MemoryPressure struct {
	// LimitBytes is the cgroup's memory limit; PeakBytes the most it used.
	LimitBytes, PeakBytes uint64
	// LimitHits counts the times the cgroup's usage hit its limit (memory.events
	// "max" on cgroup v2, memory.failcnt on v1): every one made the kernel reclaim
	// memory from the sandbox, or stall it.
	LimitHits uint64
	// OOMKills counts processes the kernel's OOM killer ended in the cgroup.
	OOMKills uint64
	// SomeStall and FullStall are the cgroup's memory pressure (PSI) totals during
	// the run: the time at least one of its tasks, and all of them at once, were
	// stalled waiting for memory.
	SomeStall, FullStall time.Duration
	// FullAvg10 is the share of the last 10 seconds, in percent, in which all of the
	// cgroup's tasks were stalled on memory, at the last sample.
	FullAvg10 float64
	// Samples is how many times the host read the cgroup.
	Samples int
	// ClaimBytes is, for a run that claimed a pooled sandbox, the sandbox's memory use
	// when it was claimed: what an idle slot (a pre-booted runtime, say) held. Zero
	// for a cold run. The counters and stall times above are the run's own, from the
	// claim on.
	ClaimBytes uint64
}

// ThrashThreshold is the share of a run's time, stalled on memory with every task
// waiting, from which Thrashing reports it.
const ThrashThreshold = 0.10

// Thrashing reports whether, over a run of duration d, the sandbox's tasks were all
// stalled on memory for at least ThrashThreshold of the time: its memory limit is too
// small for it.
func (m *MemoryPressure) Thrashing(d time.Duration) bool {
	return m != nil && d > 0 && float64(m.FullStall) >= ThrashThreshold*float64(d)
}

// String summarises the pressure for an error or a log line.
func (m *MemoryPressure) String() string {
	if m == nil {
		return "no memory data"
	}
	return fmt.Sprintf("memory: peak %d of %d bytes, limit hit %d times, %d OOM kills, stalled %v (all tasks %v)",
		m.PeakBytes, m.LimitBytes, m.LimitHits, m.OOMKills, m.SomeStall.Round(time.Millisecond), m.FullStall.Round(time.Millisecond))
}
