package identity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// journalWhole requires every line of the journal to be whole JSON.
func journalWhole(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("the journal ends in a torn line: %q", b[max(0, len(b)-80):])
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if !json.Valid(sc.Bytes()) {
			t.Errorf("journal line %d is torn: %.80q", n, sc.Bytes())
		}
	}
}

// TestFullDiskAdmissionsAndRecords: on a disk that fills up, admissions are refused
// (ErrNoSpace: the call must not be forwarded) once the journal cannot take them, while
// the records of calls already admitted are all kept, in the room the reserve gave up;
// no line is ever torn; and once space is back, admissions resume and everything
// reaches the database.
func TestFullDiskAdmissionsAndRecords(t *testing.T) {
	ctx := context.Background()
	disk := testenv.SmallDisk(t, 8<<20)
	path := filepath.Join(disk, "reg.db")
	r, err := Open(ctx, Config{Path: path, JournalReserve: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g, err := r.Register(ctx, Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	// 300 calls in flight when the disk fills.
	var tickets []string
	for i := 1; i <= 300; i++ {
		tk, err := r.AdmitCall(ctx, g.ID, port.AuditRecord{Path: "/v1/chat/completions"}, Usage{Calls: i}, 10)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	filler := testenv.Fill(t, disk)
	// The journal's last page may still take a few lines; then admissions are refused.
	for i := len(tickets) + 1; ; i++ {
		tk, err := r.AdmitCall(ctx, g.ID, port.AuditRecord{Path: "/v1/chat/completions"}, Usage{Calls: i}, 10)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("the full disk never refused an admission")
		}
		tickets = append(tickets, tk)
	}
	if st := r.Journal(); st.Reserved {
		t.Error("the reserve is still whole after a refusal: the records in flight have no room")
	}
	// Every call in flight ends with its record, in the room the reserve gave up.
	for i, tk := range tickets {
		if err := r.AppendAudit(ctx, g.ID, port.AuditRecord{CallID: fmt.Sprintf("c%d", i)}, Usage{Calls: len(tickets)}, tk); err != nil {
			t.Fatalf("record %d of %d: %v", i, len(tickets), err)
		}
	}
	journalWhole(t, path+".journal")
	if st := r.Journal(); st.Unwritten > 0 {
		t.Errorf("%d records found no room in the journal: the reserve is too small for them", st.Unwritten)
	}
	recs, _, err := r.Audit(ctx, g.ID, 0)
	if err != nil {
		t.Fatalf("audit on the full disk (the reserve's room): %v", err)
	}
	if len(recs) != len(tickets) {
		t.Errorf("the audit has %d records of the %d admitted calls", len(recs), len(tickets))
	}
	if err := filler.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AdmitCall(ctx, g.ID, port.AuditRecord{}, Usage{Calls: len(tickets) + 1}, 0); err != nil {
		t.Errorf("an admission with space back: %v", err)
	}
	if st := r.Journal(); !st.Reserved {
		t.Error("the reserve was not made again once space was back")
	}
}

// TestShortWriteIsCutBack: with no reserve, a record the full disk cuts short is
// cut back (the journal holds whole lines only) and kept in memory; the database
// cannot take it either, so the move fails and is retried: once space is back the
// record reaches the database, the file renamed aside is removed and rotation goes
// on (the journal does not keep growing).
func TestShortWriteIsCutBack(t *testing.T) {
	ctx := context.Background()
	disk := testenv.SmallDisk(t, 8<<20)
	path := filepath.Join(disk, "reg.db")
	r, err := Open(ctx, Config{Path: path, JournalReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g, err := r.Register(ctx, Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	filler := testenv.Fill(t, disk)
	big := string(bytes.Repeat([]byte("x"), 3000)) // lines that straddle the last page
	const n = 50
	for i := range n {
		if err := r.AppendAudit(ctx, g.ID, port.AuditRecord{CallID: fmt.Sprintf("c%d", i), Error: big}, Usage{Calls: i + 1}, ""); err != nil {
			t.Fatalf("record %d: %v (a record is never refused)", i, err)
		}
	}
	journalWhole(t, path+".journal")
	if st := r.Journal(); st.Unwritten == 0 {
		t.Fatal("the full disk took every record: the test proves nothing")
	}
	if err := r.sync(ctx); err == nil {
		t.Log("the database took the batch on the full disk")
	}
	if err := filler.Free(); err != nil {
		t.Fatal(err)
	}
	recs, _, err := r.Audit(ctx, g.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Errorf("the audit has %d of %d records", len(recs), n)
	}
	if _, err := os.Stat(path + ".journal.old"); !os.IsNotExist(err) {
		t.Errorf("the journal renamed aside is left: %v", err)
	}
	// Rotation goes on: new lines are moved and the file starts empty again.
	if err := r.AppendAudit(ctx, g.ID, port.AuditRecord{CallID: "after"}, Usage{Calls: n + 1}, ""); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + ".journal"); err != nil || fi.Size() != 0 {
		t.Errorf("the journal after a move: %v %v, want empty", fi.Size(), err)
	}
}

// TestCutCallsCountAfterRestart: calls admitted and never recorded (the daemon
// stopped while they were in flight) each get an audit record saying so when the
// registry opens again, and their run is charged the tokens they reserved; a call
// recorded, or settled without a record, is not cut.
func TestCutCallsCountAfterRestart(t *testing.T) {
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
	var tk [4]string
	for i := range tk {
		if tk[i], err = r.AdmitCall(ctx, g.ID, port.AuditRecord{Path: "/v1/chat/completions", Model: fmt.Sprintf("m%d", i)}, Usage{Calls: i + 1, Tokens: 100}, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.AppendAudit(ctx, g.ID, port.AuditRecord{CallID: "done", Status: 200}, Usage{Calls: 4, Tokens: 150}, tk[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, g.ID, tk[1], Usage{Calls: 4, Tokens: 160}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil { // tk[2] and tk[3] were never recorded
		t.Fatal(err)
	}
	r2, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if st := r2.Journal(); st.Cut != 2 {
		t.Errorf("%d calls cut, want 2", st.Cut)
	}
	recs, _, err := r2.Audit(ctx, g.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut := map[string]bool{}
	for _, rec := range recs {
		if rec.Error == CutCallError {
			cut[rec.Model] = true
		}
	}
	if len(recs) != 3 || !cut["m2"] || !cut["m3"] {
		t.Errorf("audit after the restart: %+v, want the recorded call and cut records of m2 and m3", recs)
	}
	if got, _ := r2.BySocket("a"); got.Calls != 4 || got.Tokens != 160+2000 {
		t.Errorf("usage after the restart: %+v, want 4 calls and 2160 tokens (160 charged + the two cut calls' 1000 reserved)", got)
	}
	// Once converted, the cut calls are not charged again.
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	r3, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if got, _ := r3.BySocket("a"); got.Tokens != 2160 || r3.Journal().Cut != 0 {
		t.Errorf("a second restart charged again: %+v", got)
	}
}
