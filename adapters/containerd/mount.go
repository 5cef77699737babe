package containerd

import "github.com/agentsandbox/sandbox/internal/slotmount"

// The slot directories' mounts: see package slotmount (shared with the Docker pool).
var (
	makeSharedDir = slotmount.MakeShared
	attach        = slotmount.Attach
	unmountUnder  = slotmount.UnmountUnder
	removeSlotDir = slotmount.RemoveDir
)

const poolSupported = slotmount.Supported
