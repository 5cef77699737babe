package main

import (
	"fmt"
	"os"
	"time"
)

// linesOutput is what `lines n ms` writes: the stdout and stderr the session log tests
// expect byte for byte (a copy lives in sandboxtest, which does not import this
// program).
func linesOutput(n int) (stdout, stderr []string) {
	for i := range n {
		if i%3 == 0 {
			stdout = append(stdout, fmt.Sprintf("tick %d\n", i))
		} else {
			stdout = append(stdout, "the same line again\n") // a follower must keep repeats
		}
		if i%10 == 9 {
			stderr = append(stderr, fmt.Sprintf("err %d\n", i))
		}
	}
	return append(stdout, "lines done\n"), stderr
}

// lines writes n lines on stdout (every third unique, the others identical) and one
// on stderr every tenth, ms milliseconds apart, then "lines done" and exits. With a
// barrier file, it waits for that file before its last line: a test's execs then find
// the session alive however slow the machine.
func lines(n, ms int, barrier string) {
	out, errs := linesOutput(n)
	e := 0
	for i, l := range out[:n] {
		os.Stdout.WriteString(l)
		if i%10 == 9 {
			os.Stderr.WriteString(errs[e])
			e++
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	for barrier != "" {
		if _, err := os.Stat(barrier); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	os.Stdout.WriteString(out[n])
}
