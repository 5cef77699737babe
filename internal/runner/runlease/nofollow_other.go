//go:build !unix

package runlease

const syscallNoFollow = 0
