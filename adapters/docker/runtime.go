package docker

import "strings"

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
