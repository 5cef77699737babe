package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestHandleResultFromLog: a session's result holds the log's tail, says how much came
// before it, and lasts from the sandbox's creation to the exit; once the handle closed
// its log (Stop removed the directory) Logs still gives what the log held; a detached
// handle gives its readers ErrClosed.
func TestHandleResultFromLog(t *testing.T) {
	root := t.TempDir()
	dir, err := CreateDir(root, "s1", "1001:1001", 8)
	if err != nil {
		t.Fatal(err)
	}
	w, err := bridgeapi.OpenLogWriter(filepath.Join(LogDir(dir), bridgeapi.LogStdout))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte("0123456789ab"))
	created := time.Now().Add(-2 * time.Second)
	h := NewHandle(Meta{ID: "s1", RunID: "r1", Dir: dir, LogLimit: 8, Created: created}, nil)
	r, err := h.Follow(context.Background(), port.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h.FinishAt(&port.RunResult{ExitCode: 3}, nil, created.Add(1500*time.Millisecond))
	res, err := h.Wait(context.Background())
	if err != nil || string(res.Stdout) != "456789ab" || !res.StdoutTruncated || res.StdoutDropped != 4 || res.StderrTruncated || res.Duration != 1500*time.Millisecond {
		t.Fatalf("result %+v %v", res, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.CloseLog()
	if out, _ := h.Logs(); string(out) != "456789ab" {
		t.Errorf("Logs after the log closed: %q", out)
	}
	// A reader opened before goes on to the end of what the log held.
	o, _, d := readAll(t, r)
	if string(o) != "456789ab" || d.Stdout != 4 {
		t.Errorf("a reader across Stop: %q dropped %d", o, d.Stdout)
	}
	if _, err := h.Follow(context.Background(), port.FollowOptions{}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("Follow once the log is gone: %v", err)
	}

	dir2, err := CreateDir(root, "s2", "1001:1001", 8)
	if err != nil {
		t.Fatal(err)
	}
	h2 := NewHandle(Meta{ID: "s2", RunID: "r2", Dir: dir2, LogLimit: 8}, nil)
	r2, err := h2.Follow(context.Background(), port.FollowOptions{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	h2.MarkDetached()
	if _, err := r2.Next(context.Background()); !errors.Is(err, port.ErrClosed) {
		t.Errorf("a reader of a detached handle: %v", err)
	}
	if _, err := h2.Follow(context.Background(), port.FollowOptions{}); !errors.Is(err, port.ErrClosed) || !strings.Contains(err.Error(), "detached") {
		t.Errorf("Follow on a detached handle: %v", err)
	}
}
