package testenv

import (
	"os"
	"strconv"
	"strings"
)

// Children returns the ids of pid's child processes (Linux: /proc/PID/task/PID/children).
func Children(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}
