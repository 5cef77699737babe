package docker

import (
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// bridgeSeesOOM reports whether the bridge inside a sandbox can count its OOM kills.
// Under gVisor it cannot: gVisor's own cgroupfs has no OOM-kill counter, and the host's
// OOM killer, which the memory limit triggers, ends the whole sandbox, bridge and all.
// Docker's OOM flag (from the runtime's OOM event) tells then.
func (r *Runner) bridgeSeesOOM() bool {
	return !IsGVisor(r.Runtime())
}

// IsGVisor reports whether the runtime registered under name is gVisor, by the name
// scripts/setup.sh (and gVisor's own documentation) registers it under: one containing
// "runsc".
func IsGVisor(name string) bool { return strings.Contains(name, "runsc") }

var _ port.OOMClassifier = (*Runner)(nil)

// OOMExact implements port.OOMClassifier. With a bridge on runc or crun it is true: the
// bridge counts OOM kills in the sandbox's own cgroup. Under gVisor, or without a
// bridge, the runner has only Docker's OOM flag, which comes from an event that can
// arrive late or, under gVisor on a loaded host, not at all: a run killed at its limit
// may then end as a plain exit 137.
func (r *Runner) OOMExact() bool { return r.cfg.bridgePath != "" && r.bridgeSeesOOM() }
