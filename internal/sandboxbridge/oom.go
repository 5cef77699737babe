package sandboxbridge

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// OOMNotice is the line the bridge writes to the child's stderr, after everything the
// child wrote, when the kernel's OOM killer ended the child: the sandbox's memory
// cgroup counted an OOM kill during the run. A runner whose runtime reports OOM kills
// only through an event that can arrive late or never (Docker's) reads it from the end
// of stderr and removes it. The agent could print it too, but only to misreport its
// own run as OOM-killed.
const OOMNotice = "\nsandbox-bridge: the agent was killed by the kernel's OOM killer (memory limit reached)\n"

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

// ExecFailedPrefix starts the last line the bridge writes to stderr when it could not
// start the command (exit code 126 or 127): the runtime started the sandbox, but the
// agent never ran, which runners report as a container failure, as they do when the
// runtime itself cannot exec the entrypoint.
const ExecFailedPrefix = "sandbox-bridge: cannot start the command: "

// ExecFailure returns the reason from an ExecFailedPrefix line at the end of tail (the
// end of a sandbox's stderr).
func ExecFailure(tail []byte) (string, bool) {
	tail = bytes.TrimSuffix(tail, []byte{'\n'})
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	reason, ok := bytes.CutPrefix(tail, []byte(ExecFailedPrefix))
	return string(reason), ok
}
