package identity_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/port"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func open(t *testing.T, path string, c *clock) *identity.Registry {
	t.Helper()
	r, err := identity.Open(context.Background(), identity.Config{Path: path, TTL: time.Hour, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func newClock() *clock { return &clock{t: time.Date(2026, 2, 4, 10, 30, 45, 0, time.UTC)} }

func TestTTLExpiryAndGC(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	r := open(t, filepath.Join(t.TempDir(), "reg.db"), c)
	a, err := r.Register(ctx, identity.Registration{RunID: "run-a", Socket: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Register(ctx, identity.Registration{RunID: "run-b", Socket: "b"}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.add(50 * time.Minute)
	if _, ok := r.BySocket("a"); !ok { // renews a only
		t.Fatal("a not found")
	}
	c.add(20 * time.Minute) // b: 70 min unseen; a: 20 min
	gone, err := r.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0].ID != b.ID {
		t.Fatalf("GC removed %+v, want only b", gone)
	}
	if _, ok := r.BySocket("b"); ok {
		t.Error("b still found after GC")
	}
	if g, ok := r.ByID(a.ID); !ok || !g.LastSeen.Equal(c.now().Add(-20*time.Minute)) {
		t.Errorf("a = %+v %v", g, ok)
	}
}

func TestRenewalsAreBatchedAndSurviveReopen(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := filepath.Join(t.TempDir(), "reg.db")
	r, err := identity.Open(ctx, identity.Config{Path: path, TTL: time.Hour, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.Register(ctx, identity.Registration{RunID: "run-a", Attempt: 2, Socket: "a", Spec: []byte("sealed")}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	r.BySocket("a")
	rec := port.AuditRecord{RunID: "run-a", Attempt: 2, Method: "POST", Path: "/v1/chat/completions", Status: 200, CallID: "c1"}
	if err := r.AppendAudit(ctx, g.ID, rec, identity.Usage{Calls: 1, Tokens: 42}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, path, c)
	got, ok := r2.BySocket("a")
	if !ok || got.RunID != "run-a" || got.Attempt != 2 || string(got.Spec) != "sealed" || got.Calls != 1 || got.Tokens != 42 {
		t.Fatalf("after reopen: %+v", got)
	}
	recs, last, err := r2.Audit(ctx, g.ID, 0)
	if err != nil || len(recs) != 1 || recs[0].CallID != "c1" || last == 0 {
		t.Fatalf("audit after reopen: %+v %d %v", recs, last, err)
	}
	if more, _, _ := r2.Audit(ctx, g.ID, last); len(more) != 0 {
		t.Errorf("audit after the last seq: %+v", more)
	}
}

func TestRestartDetection(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	r := open(t, filepath.Join(t.TempDir(), "reg.db"), c)
	ip := netip.MustParseAddr("172.20.0.5")
	start := c.now()
	first, err := r.Register(ctx, identity.Registration{RunID: "run-a", Name: "repo-feature", IP: ip, StartTime: start}, "token123")
	if err != nil {
		t.Fatal(err)
	}
	id := "repo-feature:" + start.Format(time.RFC3339Nano) + ":token123"
	if g, err := r.ByIP(ip, id); err != nil || g.ID != first.ID {
		t.Fatalf("ByIP with the right X-Sandbox-ID: %+v %v", g, err)
	}
	if _, err := r.ByIP(ip, ""); err != nil {
		t.Errorf("the header is optional: %v", err)
	}
	for name, bad := range map[string]string{
		"token":      "repo-feature:" + start.Format(time.RFC3339Nano) + ":token124",
		"name":       "other:" + start.Format(time.RFC3339Nano) + ":token123",
		"start time": "repo-feature:" + start.Add(time.Minute).Format(time.RFC3339Nano) + ":token123",
		"form":       "repo-feature",
	} {
		if _, err := r.ByIP(ip, bad); !errors.Is(err, identity.ErrIdentity) {
			t.Errorf("%s: %v, want ErrIdentity", name, err)
		}
	}
	// Same start time again: a duplicate, refused.
	if _, err := r.Register(ctx, identity.Registration{RunID: "run-a", Name: "repo-feature", IP: ip, StartTime: start}, "x"); !errors.Is(err, identity.ErrExists) {
		t.Errorf("duplicate: %v", err)
	}
	// The sandbox restarts: new start time, new IP, new token.
	c.add(5 * time.Minute)
	ip2 := netip.MustParseAddr("172.20.0.9")
	second, err := r.Register(ctx, identity.Registration{RunID: "run-a", Name: "repo-feature", IP: ip2, StartTime: c.now()}, "token456")
	if err != nil {
		t.Fatal(err)
	}
	if second.Restarted != first.ID || second.Calls != 0 {
		t.Errorf("restart not detected: %+v", second)
	}
	if _, err := r.ByIP(ip, ""); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("the old IP still resolves: %v", err)
	}
	old, ok := r.ByID(first.ID)
	if !ok || old.State != identity.Superseded {
		t.Errorf("old registration %+v, want superseded and kept until it expires", old)
	}
	c.add(61 * time.Minute)
	r.ByIP(ip2, "")
	gone, _ := r.GC(ctx)
	if len(gone) != 1 || gone[0].ID != first.ID {
		t.Errorf("GC removed %+v, want the superseded one", gone)
	}
}

func TestProactiveRemoval(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	r := open(t, filepath.Join(t.TempDir(), "reg.db"), c)
	g, _ := r.Register(ctx, identity.Registration{RunID: "run-a", Socket: "a"}, "")
	_ = r.AppendAudit(ctx, g.ID, port.AuditRecord{RunID: "run-a"}, identity.Usage{Calls: 1})
	if err := r.Remove(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.BySocket("a"); ok {
		t.Error("found after Remove")
	}
	if recs, _, _ := r.Audit(ctx, g.ID, 0); len(recs) != 0 {
		t.Errorf("audit kept after Remove: %+v", recs)
	}
	if err := r.Remove(ctx, g.ID); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("second Remove: %v", err)
	}
	// The socket name is free again.
	if _, err := r.Register(ctx, identity.Registration{RunID: "run-a", Socket: "a"}, ""); err != nil {
		t.Error(err)
	}
}

func TestCorruptDatabase(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"garbage":   []byte("this is not a database at all, but long enough to look like a header........................................................."),
		"truncated": nil,
	} {
		path := filepath.Join(dir, name+".db")
		if content == nil {
			// A real registry with its header destroyed.
			r, err := identity.Open(context.Background(), identity.Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			r.Register(context.Background(), identity.Registration{RunID: "x", Socket: "x"}, "")
			r.Close()
			b, _ := os.ReadFile(path)
			copy(b[:16], "NOT SQLITE FMT!!")
			content = b
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(path + "-wal")
		os.Remove(path + "-shm")
		_, err := identity.Open(context.Background(), identity.Config{Path: path})
		if !errors.Is(err, identity.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
		if b, _ := os.ReadFile(path); string(b) != string(content) {
			t.Errorf("%s: the corrupt file was changed", name)
		}
	}
}

func TestConcurrentRegistrations(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := filepath.Join(t.TempDir(), "reg.db")
	r, err := identity.Open(ctx, identity.Config{Path: path, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := r.Register(ctx, identity.Registration{RunID: fmt.Sprintf("run-%d", i), Socket: fmt.Sprintf("s%d", i)}, "")
			if err == nil {
				err = r.AppendAudit(ctx, g.ID, port.AuditRecord{RunID: g.RunID, Status: 200}, identity.Usage{Calls: 1})
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, path, c)
	if got := len(r2.List()); got != n {
		t.Fatalf("%d registrations after reopen, want %d", got, n)
	}
	for i := range n {
		g, ok := r2.BySocket(fmt.Sprintf("s%d", i))
		if !ok || g.RunID != fmt.Sprintf("run-%d", i) || g.Calls != 1 {
			t.Fatalf("socket s%d: %+v", i, g)
		}
	}
}

func TestRegisterRefusesBadInput(t *testing.T) {
	r := open(t, filepath.Join(t.TempDir(), "reg.db"), newClock())
	for name, g := range map[string]identity.Registration{
		"bad run":         {RunID: "../x", Socket: "a"},
		"neither":         {RunID: "r"},
		"both":            {RunID: "r", Socket: "a", IP: netip.MustParseAddr("10.0.0.1")},
		"colon in name":   {RunID: "r", Name: "a:b", Socket: "a"},
		"newline in name": {RunID: "r", Name: "a\nb", Socket: "a"},
	} {
		if _, err := r.Register(context.Background(), g, ""); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func BenchmarkRegister(b *testing.B) {
	r, err := identity.Open(context.Background(), identity.Config{Path: filepath.Join(b.TempDir(), "reg.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	i := 0
	for b.Loop() {
		i++
		if _, err := r.Register(context.Background(), identity.Registration{RunID: fmt.Sprintf("run-%d", i), Socket: fmt.Sprintf("s%d", i)}, ""); err != nil {
			b.Fatal(err)
		}
	}
}
