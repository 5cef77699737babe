//go:build unix

package runlease

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
