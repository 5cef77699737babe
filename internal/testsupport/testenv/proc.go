package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Children returns the ids of pid's child processes, sorted (Linux: the children files
// of every thread of pid: a child is listed under the thread that started it, and a Go
// program starts one from whichever thread runs the goroutine).
func Children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
