//go:build unix

package sandbox

import (
	"io/fs"
	"syscall"
)

// owner returns a file's numeric owner and group.
func owner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
