//go:build !unix

package docker

import (
	"fmt"

	"github.com/agentsandbox/sandbox/port"
)

func mkfifo(string, uint32) error {
	return fmt.Errorf("%w: the nginx proxy's audit pipe needs a unix host", port.ErrUnsupported)
}
