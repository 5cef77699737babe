package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	internalproxyd "github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/runtoken"
)

// TestProxydAuditFollowsAcrossRestart: `proxyd audit --follow` outlives a restart of
// the daemon (its runs do): it follows the run again from its last record, printing
// each record once, and ends with the run. It used to stop at the restart.
func TestProxydAuditFollowsAcrossRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctlf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	adminSock := filepath.Join(dir, "admin.sock")
	type daemon struct {
		srv *internalproxyd.Server
		ln  net.Listener
	}
	start := func() daemon {
		srv, err := internalproxyd.Open(context.Background(), internalproxyd.Config{StateDir: filepath.Join(dir, "state"), SocketDir: filepath.Join(dir, "runs"),
			Keys: runtoken.Keys{Current: []byte("sandboxctl-test-secret-0123456789abcdef")}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := internalproxyd.ListenAdmin(adminSock)
		if err != nil {
			t.Fatal(err)
		}
		go srv.ServeAdmin(ln)
		return daemon{srv, ln}
	}
	stop := func(d daemon) {
		d.ln.Close()
		if err := d.srv.Close(); err != nil {
			t.Error(err)
		}
	}
	d := start()
	defer func() { stop(d) }()
	cli, err := proxyd.NewClient(adminSock)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	fake := litellmtest.NewServer()
	defer fake.Close()
	ctx := context.Background()
	reg, err := cli.Register(ctx, proxyd.RegisterRequest{RunID: "ctl-follow", Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: proxydapi.Attribution{BillingAccountID: "acct"}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(marker string) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", reg.SocketPath)
		}}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions", strings.NewReader(`{"model":"`+marker+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(runtoken.Header, reg.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var out, errb syncBuf
	done := make(chan int, 1)
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		done <- run(fctx, []string{"proxyd", "audit", "--follow", "--json", "--admin-socket", adminSock, reg.ID}, &out, &errb)
	}()
	waitFor := func(what string) {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), what); time.Sleep(20 * time.Millisecond) {
			select {
			case code := <-done:
				t.Fatalf("audit --follow exited %d before it printed %s:\n%s\n%s", code, what, out.String(), errb.String())
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("audit --follow never printed %s:\n%s\n%s", what, out.String(), errb.String())
			}
		}
	}
	call("model-before")
	waitFor("model-before")
	stop(d)
	d = start()
	call("model-after")
	waitFor("model-after")
	// A client of its own: cli's idle connection is still served by the stopped
	// daemon's admin server (in-process, nothing closes it), which would take the call.
	cli2, err := proxyd.NewClient(adminSock)
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	if _, err := cli2.Deregister(ctx, reg.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("audit --follow exited %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("audit --follow did not end with the run:\n%s\n%s", out.String(), errb.String())
	}
	for _, m := range []string{"model-before", "model-after"} {
		if n := strings.Count(out.String(), m); n != 1 {
			t.Errorf("%s printed %d times:\n%s", m, n, out.String())
		}
	}
	if !strings.Contains(errb.String(), "following again") {
		t.Errorf("nothing said the stream was cut: %q", errb.String())
	}
}
