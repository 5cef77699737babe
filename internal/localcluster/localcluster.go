// Package localcluster holds what the development clusters of adapters/nomad/nomadlocal
// and adapters/kubernetes/kubelocal share: loopback ports chosen up front for the
// programs they start, and the tail of a program's log for an error message. It
// imports nothing of the module's test support, so a program that starts a local
// cluster (examples/nomad -local) links no package testing.
package localcluster

import (
	"net"
	"os"
	"strings"
)

// FreePorts returns n distinct loopback TCP ports that were free a moment ago (all
// held at once while choosing, so none repeats), for programs that must be told
// their ports up front.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TailFile returns the last n lines of the file at path (a log, for an error message),
// or the error reading it.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
