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
		// Written aside and renamed in: a pause can freeze the process at any point,
		// and a reader must never find the file truncated but not yet written.
		if os.WriteFile(progress+".next", []byte(strconv.Itoa(n)), 0o644) == nil {
			_ = os.Rename(progress+".next", progress)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
