package integration

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/gobuild"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/runtoken"
)

// TestProxydAuditFollowAcrossKills: `sandboxctl proxyd audit --follow`, a process of
// its own, follows a run while the daemon (a process of its own too) is killed with
// SIGKILL and started again, twice, and stopped with SIGTERM and started again once:
// it prints every record of the run exactly once, in order, and exits 0 when the
// run is deregistered. It used to stop at the first kill (exit 4: "audit stream
// cut"), losing every later record.
func TestProxydAuditFollowAcrossKills(t *testing.T) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	buildCtx, cancelBuild := testenv.UntimedContext(t)
	defer cancelBuild()
	ctl, err := gobuild.Cached(buildCtx, "github.com/agentsandbox/sandbox/cmd/sandboxctl", "sandboxctl", filepath.Join(base, "agentsandbox", "sandboxctl"))
	if err != nil {
		t.Fatal(err)
	}
	fake := litellmtest.NewServer()
	defer fake.Close()
	d := startProxyd(t)
	// The clock starts after the builds (sandboxctl, the daemon): on a loaded machine
	// they took more than the 3 minutes this test gives what it checks.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reg, err := d.client.Register(ctx, proxyd.RegisterRequest{RunID: "follow-kills", Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: proxydapi.Attribution{BillingAccountID: "acct-follow"}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(model string) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", reg.SocketPath)
		}}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandbox/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(runtoken.Header, reg.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var stdout, stderr bytes.Buffer
	var mu = &d.mu // the daemon's lock also guards the follower's output buffers
	cmd := exec.CommandContext(ctx, ctl, "proxyd", "audit", "--follow", "--json", "--admin-socket", filepath.Join(d.dir, "admin.sock"), reg.ID)
	cmd.Stdout = &lockedWriter{w: &stdout, mu: mu}
	cmd.Stderr = &lockedWriter{w: &stderr, mu: mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	out := func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		return stdout.String(), stderr.String()
	}
	waitFor := func(model string) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			o, e := out()
			if strings.Contains(o, `"`+model+`"`) {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("the follower exited (%v) before it printed %s:\n%s\n%s", err, model, o, e)
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("the follower never printed %s:\n%s\n%s", model, o, e)
			}
		}
	}
	models := []string{"m-0"}
	call("m-0")
	waitFor("m-0")
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGKILL} {
		// Two calls per daemon: one the follower may see before the stop, one after
		// the restart, that it must fetch from the journal (stored while it was away).
		d.stop(sig)
		d.start()
		for j := range 2 {
			m := "m-" + string(rune('a'+i)) + string(rune('0'+j))
			call(m)
			models = append(models, m)
		}
		waitFor(models[len(models)-1])
	}
	if _, err := d.client.Deregister(ctx, reg.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			o, e := out()
			t.Fatalf("the follower exited with %v:\n%s\n%s", err, o, e)
		}
	case <-time.After(30 * time.Second):
		o, e := out()
		t.Fatalf("the follower did not end with the run:\n%s\n%s", o, e)
	}
	o, e := out()
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(o), "\n") {
		for _, m := range models {
			if strings.Contains(line, `"`+m+`"`) {
				got = append(got, m)
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(models, ",") {
		t.Errorf("the follower printed the calls %v, want each of %v once, in order:\n%s", got, models, o)
	}
	if n := strings.Count(e, "following again"); n != 3 {
		t.Errorf("the follower said %d times that it follows again, want 3 (one per stop):\n%s", n, e)
	}
}
