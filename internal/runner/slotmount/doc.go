// Package slotmount is the host side of a warm pool's slot directories, shared by the
// Docker and containerd pools: each mount point is a shared mount the sandbox mounts
// rslave when it is created, and a run's directories are attached on them at claim
// time, so they appear inside a sandbox that already runs.
package slotmount
