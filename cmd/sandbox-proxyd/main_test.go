package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestEgressFlags: bad egress settings stop the daemon before it serves, with a
// message naming the problem.
func TestEgressFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-state-dir", filepath.Join(dir, "s"), "-socket-dir", filepath.Join(dir, "r"), "-admin-socket", filepath.Join(dir, "a.sock")}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"prefix":        {[]string{"-egress-unsafe-allow", "127.0.0.1"}, 2, "not an address prefix"},
		"roots":         {[]string{"-egress-upstream-roots", notPEM}, 2, "holds no PEM certificate"},
		"missing roots": {[]string{"-egress-upstream-roots", filepath.Join(dir, "none.pem")}, 2, "no such file"},
		"proxy":         {[]string{"-egress-upstream-proxy", "socks5://127.0.0.1:1080"}, 2, "egress"},
	} {
		var stderr bytes.Buffer
		if code := run(append(append([]string{}, base...), tc.args...), &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestUpstreamKeyFile: the key file is read at each call (a rotated Secret takes
// effect), trimmed, and refused when empty, binary, missing, or accessible by anyone
// but its owner, without its content in the error.
func TestUpstreamKeyFile(t *testing.T) {
	if upstreamKey("") != nil {
		t.Fatal("no file should mean no daemon-held key")
	}
	f := filepath.Join(t.TempDir(), "key")
	read := upstreamKey(f)
	if _, err := read(); err == nil {
		t.Error("a missing file gave a key")
	}
	for content, want := range map[string]string{"sk-one\n": "sk-one", "sk-two": "sk-two"} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err != nil || k != want {
			t.Errorf("%q: %q %v", content, k, err)
		}
	}
	// As ssh does: a key file someone else may read or write is refused, naming
	// the file and its mode, never the key.
	if err := os.WriteFile(f, []byte("sk-secret-world"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o660} {
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode)) || strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("mode %04o: %q %v", mode, k, err)
		}
	}
	if err := os.Chmod(f, 0o400); err != nil {
		t.Fatal(err)
	}
	if k, err := read(); err != nil || k != "sk-secret-world" {
		t.Errorf("mode 0400: %q %v", k, err)
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"\n", "sk-with space-secret", "sk-\x00secret"} {
		if err := os.WriteFile(f, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err == nil || strings.Contains(err.Error(), "secret") && !strings.Contains(f, "secret") {
			t.Errorf("%q: %q %v", bad, k, err)
		}
	}
}

// TestDamagedJournalIsNotACorruptDatabase: a damaged line in the audit journal is
// reported as what it is (exit 4, naming the journal and -salvage-journal, saying the
// database is intact), not as a corrupt database to move aside (which would lose every
// run); with -salvage-journal the daemon starts, the damaged line kept aside.
func TestDamagedJournalIsNotACorruptDatabase(t *testing.T) {
	dir := testenv.ShortDir(t, "pxj")
	state := filepath.Join(dir, "s")
	base := []string{"-state-dir", state, "-socket-dir", filepath.Join(dir, "r"), "-admin-socket", filepath.Join(dir, "a.sock")}
	// A registry with one run, then a journal with a damaged line between two good ones.
	ctx := context.Background()
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	reg, err := identity.Open(ctx, identity.Config{Path: filepath.Join(state, proxydaemon.DBName)})
	if err != nil {
		t.Fatal(err)
	}
	g, err := reg.Register(ctx, identity.Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	good := func(rid string) string {
		return `{"rid":"` + rid + `","reg":"` + g.ID + `","usage":{"calls":1},"record":{"call_id":"` + rid + `"}}` + "\n"
	}
	journal := filepath.Join(state, proxydaemon.DBName+".journal")
	if err := os.WriteFile(journal, []byte(good("x-1")+"{\"rid\":\"x-2\",\"re#!\n"+good("x-3")), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(base, &stderr)
	out := stderr.String()
	if code != 4 || !strings.Contains(out, "audit journal has a damaged line") || !strings.Contains(out, "-salvage-journal") ||
		!strings.Contains(out, "database is intact") || strings.Contains(out, "database is corrupt") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 4 naming the damaged journal and -salvage-journal, not a corrupt database", code, out)
	}
	// -salvage-journal: the daemon starts and serves (then stops on SIGTERM).
	done := make(chan int, 1)
	var log2 bytes.Buffer
	go func() { done <- run(append(append([]string{}, base...), "-salvage-journal"), &syncWriter{w: &log2}) }()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", filepath.Join(dir, "a.sock")); err == nil {
			c.Close()
			break
		}
		select {
		case code := <-done:
			t.Fatalf("with -salvage-journal the daemon exited %d", code)
		default:
		}
		if time.Now().After(end) {
			t.Fatal("with -salvage-journal the daemon does not serve")
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("the salvaging daemon exited %d", code)
	}
	r2, err := identity.Open(ctx, identity.Config{Path: filepath.Join(state, proxydaemon.DBName)})
	if err != nil {
		t.Fatalf("after salvage: %v", err)
	}
	defer r2.Close()
	recs, _, err := r2.Audit(ctx, g.ID, 0)
	if err != nil || len(recs) != 2 || recs[0].CallID != "x-1" || recs[1].CallID != "x-3" {
		t.Errorf("after salvage: %+v %v, want the records of lines 1 and 3", recs, err)
	}
	aside, _ := filepath.Glob(journal + ".damaged-*")
	if len(aside) != 1 || !strings.Contains(log2.String(), "damaged_lines_kept_aside=1") {
		t.Errorf("salvage kept %v aside; log:\n%s", aside, log2.String())
	} else if b, _ := os.ReadFile(aside[0]); !strings.Contains(string(b), "re#!") {
		t.Errorf("the damaged line kept aside is %q", b)
	}
}

// syncWriter serialises writes (the daemon's logger writes from many goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
