package identity

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate gives f size bytes of blocks of its own (not a sparse file).
func allocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err != unix.EINTR {
			return err
		}
	}
}

// freeSpace is what the file system holding dir has free for this process.
func freeSpace(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
