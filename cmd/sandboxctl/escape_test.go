package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/proxydapi"
)

// An audit record whose agent-chosen fields hold terminal control sequences, a
// forged row (CR/LF, tabs), invalid UTF-8 and a bidi override prints as one row
// of eight columns with none of those bytes in it.
func TestAuditRowIsInert(t *testing.T) {
	evil := "\x1b]0;owned\x07\x1b[2J\r\n12:00:00.000\t200\tPOST\t/v1/forged\t\xff\u202e\x9b"
	row := auditRow(proxydapi.AuditRecord{Time: time.Unix(0, 0), Status: 404, Method: "GET", Path: "/v1/" + evil,
		Model: "gpt" + evil, Blocked: "route_not_allowed" + evil, CallID: "call" + evil, Latency: time.Millisecond})
	if strings.Count(row, "\n") != 1 || !strings.HasSuffix(row, "\n") || strings.Count(row, "\t") != 7 {
		t.Errorf("row is not one line of eight columns: %q", row)
	}
	for _, r := range strings.TrimSuffix(row, "\n") {
		if r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' || r == '\ufffd') {
			t.Errorf("row holds %U: %q", r, row)
		}
	}
	if !strings.Contains(row, `/v1/\x1b]0;owned\a\x1b[2J\r\n12:00:00.000\t200`) {
		t.Errorf("the path is not shown escaped: %q", row)
	}
	if got := shown(`gpt-4o-mini é \`); got != `gpt-4o-mini é \\` {
		t.Errorf("shown = %q", got)
	}
}
