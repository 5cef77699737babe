// Package localcluster holds what the development clusters of adapters/nomad/nomadlocal
// and adapters/kubernetes/kubelocal share: loopback ports chosen up front for the
// programs they start, the tail of a program's log for an error message, and the
// mounts to detach when they close. It imports nothing of the module's test support,
// so a program that starts a local cluster (examples/nomad -local) links no package
// testing.
package localcluster

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"sort"
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

// MountsUnder lists the mount points at or under any of prefixes, deepest first (the
// order to detach them in); none when the mount table cannot be read.
func MountsUnder(prefixes ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) <= 4 {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(fields[4], filepath.Clean(p)+"/") || fields[4] == p {
				points = append(points, fields[4])
			}
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	return points
}
