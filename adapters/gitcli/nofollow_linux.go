package gitcli

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
