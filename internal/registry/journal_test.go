package registry

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
