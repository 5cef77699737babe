package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// ticks counts in memory, every 20 ms: it prints "tick N" and writes N to the
// progress file, forever. A test pausing the sandbox sees the count stop (no CPU)
// and go on from where it stopped (memory kept) when the sandbox resumes.
func ticks(progress string) {
	for n := 1; ; n++ {
		fmt.Printf("tick %d\n", n)
		_ = os.WriteFile(progress, []byte(strconv.Itoa(n)), 0o644)
		time.Sleep(20 * time.Millisecond)
	}
}
