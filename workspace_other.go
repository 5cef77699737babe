//go:build !unix

package sandbox

import "io/fs"

// owner reports no owner: sandboxes run on Linux, where workspace_unix.go applies.
func owner(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }

// openNoFollow: the sweep's Lstat checks stand alone off unix.
const openNoFollow = 0
