package testenv

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// tagEnv carries the owner tag of a test process to the processes it starts (a crash
// child must own what its parent's test checks).
const tagEnv = "AGENTSANDBOX_TEST_OWNER_TAG"

// processTag names this test process for as long as it lives: its pid and its start
// time (pids are reused; the pair is not).
var processTag = func() string {
	if t := os.Getenv(tagEnv); tagRE.MatchString("x-" + t) {
		return t
	}
	t := fmt.Sprintf("t%d-%d", os.Getpid(), startTime(os.Getpid()))
	os.Setenv(tagEnv, t)
	return t
}()

var tagRE = regexp.MustCompile(`-t([0-9]+)-([0-9]+)$`)

// Owner returns the owner label value a test uses for name: name plus this test
// process's tag. Two test processes (a crashed earlier run, the same package run from
// another checkout) never share an owner, so a test's leftover checks and sweeps see
// only its own resources, and OwnerDead tells a crashed run's owners from a live one's.
func Owner(name string) string { return name + "-" + processTag }

// OwnerDead reports whether owner was made by Owner in a test process that no longer
// runs. Owners without a tag (made otherwise) are never dead: they are not a test's.
func OwnerDead(owner string) bool {
	m := tagRE.FindStringSubmatch(owner)
	if m == nil {
		return false
	}
	pid, err1 := strconv.Atoi(m[1])
	start, err2 := strconv.ParseUint(m[2], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return startTime(pid) != start
}

// startTime is a process's start time in clock ticks since boot (field 22 of
// /proc/PID/stat), 0 when there is no such process.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command (field 2) may hold spaces and parentheses: split after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
