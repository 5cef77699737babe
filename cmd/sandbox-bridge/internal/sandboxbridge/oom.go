package sandboxbridge

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// cgroupOOMFiles are where a sandbox sees its own memory cgroup's OOM-kill counter:
// cgroup v1 (the container's memory cgroup is mounted at memory/) and v2.
var cgroupOOMFiles = []string{
	"/sys/fs/cgroup/memory/memory.oom_control",
	"/sys/fs/cgroup/memory.events",
}

// oomKills reads the sandbox's OOM-kill counter; ok is false when no cgroup file
// shows one (not in a container, or cgroupfs not mounted).
func oomKills() (n uint64, ok bool) {
	for _, p := range cgroupOOMFiles {
		if n, ok := readCounter(p, "oom_kill"); ok {
			return n, true
		}
	}
	return 0, false
}

// readCounter returns the value of the "key value" line in a cgroup flat-keyed file.
func readCounter(path, key string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64<<10 {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := bytes.Cut(sc.Bytes(), []byte{' '})
		if found && string(k) == key {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
