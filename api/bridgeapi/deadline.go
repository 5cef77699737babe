package bridgeapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The deadline file moves a long-running sandbox's deadline while it runs (a session
// resumed from a pause that stopped its clock). The host writes it into a directory
// mounted read-only in the sandbox and names it to the bridge with -deadline-file;
// when the bridge's own deadline passes it reads the file and, if the file holds a
// later time, waits for that instead.
//
// Format: the session's deadline (the host's, without the bridge's slack) in Unix
// milliseconds as decimal text, optionally followed by a newline; at most
// MaxDeadlineFileBytes. The bridge's deadline is that time plus its slack.
const MaxDeadlineFileBytes = 64

// FormatDeadline renders t as a deadline file's content.
func FormatDeadline(t time.Time) []byte {
	return []byte(strconv.FormatInt(t.UnixMilli(), 10) + "\n")
}

// ParseDeadline reads a deadline file's content.
func ParseDeadline(b []byte) (time.Time, error) {
	if len(b) > MaxDeadlineFileBytes {
		return time.Time{}, fmt.Errorf("bridgeapi: deadline file of %d bytes, over %d", len(b), MaxDeadlineFileBytes)
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, fmt.Errorf("bridgeapi: deadline file %q is not Unix milliseconds", b)
	}
	return time.UnixMilli(ms), nil
}
