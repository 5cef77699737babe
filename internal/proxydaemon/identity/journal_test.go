package identity

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestJournalReplay: records a killed process left in the journal files (the
// current one and one renamed aside mid-move, with a torn last line) are stored
// once each when the registry opens again, and the usage they carry wins.
func TestJournalReplay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reg.db")
	r, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.Register(ctx, Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AppendAudit(ctx, g.ID, port.AuditRecord{CallID: "c1"}, Usage{Calls: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	line := func(rid, call string, calls int) string {
		b, _ := json.Marshal(journalLine{RID: rid, RegID: g.ID, Usage: Usage{Calls: calls, Tokens: 7}, Record: port.AuditRecord{CallID: call}})
		return string(b) + "\n"
	}
	// c2 is in both files (a move that renamed, then died before removing the old file).
	os.WriteFile(path+".journal.old", []byte(line("x-2", "c2", 2)), 0o600)
	os.WriteFile(path+".journal", []byte(line("x-2", "c2", 2)+line("x-3", "c3", 3)+`{"rid":"x-4","reg":`), 0o600)
	r2, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	recs, _, err := r2.Audit(ctx, g.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, rec := range recs {
		calls = append(calls, rec.CallID)
	}
	if len(calls) != 3 || calls[0] != "c1" || calls[1] != "c2" || calls[2] != "c3" {
		t.Errorf("audit after replay: %v", calls)
	}
	if got, _ := r2.BySocket("a"); got.Calls != 3 || got.Tokens != 7 {
		t.Errorf("usage after replay: %+v", got)
	}
	if _, err := os.Stat(path + ".journal.old"); !os.IsNotExist(err) {
		t.Errorf("the old journal is left: %v", err)
	}
}

// TestJournalCorruptLine: a line other than a torn last one that does not
// decode is corruption: Open fails with ErrCorrupt naming the line and leaves
// the journal as it was, instead of dropping a call's record and undercounting
// its run.
func TestJournalCorruptLine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reg.db")
	r, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.Register(ctx, Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	line := func(rid, call string, calls int) string {
		b, _ := json.Marshal(journalLine{RID: rid, RegID: g.ID, Usage: Usage{Calls: calls}, Record: port.AuditRecord{CallID: call}})
		return string(b) + "\n"
	}
	for name, middle := range map[string]string{
		"garbage":      "{\"rid\":\"x-2\",\"reg\":\"" + g.ID + "\",\"usage\":{\"calls\":2},\"rec#@!\n",
		"not an entry": "{}\n",
		"empty line":   "\n",
	} {
		content := line("x-1", "c1", 1) + middle + line("x-3", "c3", 3)
		if err := os.WriteFile(path+".journal", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		r2, err := Open(ctx, Config{Path: path})
		if err == nil {
			r2.Close()
			t.Fatalf("%s: a corrupt middle line was skipped", name)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: err = %v, want ErrCorrupt naming line 2", name, err)
		}
		if b, _ := os.ReadFile(path + ".journal"); string(b) != content {
			t.Errorf("%s: the journal was changed: %q", name, b)
		}
	}
	// A torn last line alone is skipped; the usage of a usage-only line counts.
	os.WriteFile(path+".journal", []byte(line("x-1", "c1", 1)+`{"rid":"x-9","reg":"`+g.ID+`","usage":{"calls":5},"usage_only":true,"record":{}}`+"\n"+`{"rid":"x-4","reg":`), 0o600)
	r3, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	recs, _, _ := r3.Audit(ctx, g.ID, 0)
	if got, _ := r3.BySocket("a"); len(recs) != 1 || got.Calls != 5 {
		t.Errorf("after a torn last line: %d records, usage %+v", len(recs), got)
	}
}
