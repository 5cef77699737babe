//go:build unix

package sandbox

import (
	"io/fs"
	"syscall"
)

// openNoFollow refuses a link and does not block on a FIFO where a marker should be.
const openNoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// owner returns a file's numeric owner and group.
func owner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
