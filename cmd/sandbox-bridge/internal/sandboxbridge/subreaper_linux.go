package sandboxbridge

import "golang.org/x/sys/unix"

// setSubreaper makes this process the reaper of its descendants' orphans.
func setSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// SetUndumpable makes this process's memory and file descriptors unreadable through
// /proc and ptrace to processes of the same user without CAP_SYS_PTRACE: a stub's
// command (and a runtime it preloads) cannot read the claim or its exit nonce out
// of the stub. Its children are dumpable again once they exec.
func SetUndumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
