package sandboxbridge

import (
	"strconv"
	"time"
)

// Deadline slack and grace used by runners: the bridge's own deadline comes after the
// host's time limit (which normally ends the run, classified as a timeout), so it only
// acts when the host is gone.
const (
	DeadlineSlack = 2 * time.Second
	DeadlineGrace = 2 * time.Second
)

// Prefix is the command line that runs a sandbox's argv behind the bridge binary at
// path: forwarding to the LLM socket (and attesting the sandbox to its proxy first)
// when forward is true, else only as the init; ending the command at
// timeout+DeadlineSlack from now when timeout is positive.
func Prefix(path string, forward bool, timeout time.Duration, now time.Time) []string {
	p := []string{path}
	if forward {
		p = append(p, "-attest")
	} else {
		p = append(p, "-no-forward")
	}
	if timeout > 0 {
		p = append(p, "-deadline", strconv.FormatInt(now.Add(timeout+DeadlineSlack).UnixMilli(), 10),
			"-grace", DeadlineGrace.String())
	}
	return append(p, "--")
}
