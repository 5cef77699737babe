package containerd

import "github.com/agentsandbox/sandbox/internal/runner/slotmount"

// The slot directories' mounts: see package slotmount (shared with the Docker pool,
// through package warmpool).
var removeSlotDir = slotmount.RemoveDir

const poolSupported = slotmount.Supported
