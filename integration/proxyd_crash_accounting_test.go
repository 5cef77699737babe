package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// TestProxydCrashKeepsCallCountAndAttestation: SIGKILL the daemon while a run's
// only call streams. After the restart the cut call still counts against
// MaxCalls (the upstream saw it: it may bill it), so the upstream never sees
// more calls than the budget; and a run that required attestation keeps the
// attestation its bridge sent (its calls pass) and takes no other. About 3 s.
func TestProxydCrashKeepsCallCountAndAttestation(t *testing.T) {
	const budget = 2
	fake, err := litellmtest.NewUnstartedServer(litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "a b", Chunks: []string{"a ", "b"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.Handler().ServeHTTP(&holdWriter{ResponseWriter: w, release: release}, r)
	}))
	defer func() { releaseOnce.Do(func() { close(release) }); up.Close(); fake.Close() }()
	upstreamCalls := func(runID string) int {
		n := 0
		for _, r := range fake.Requests() {
			if r.Path == "/v1/chat/completions" && strings.Contains(r.Header.Get("X-Litellm-Spend-Logs-Metadata"), `"run_id":"`+runID+`"`) {
				n++
			}
		}
		return n
	}

	d := startProxyd(t)
	m, err := proxyd.NewManager(d.client)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := func(id string) port.ProxySpec {
		return port.ProxySpec{RunID: id, Upstream: up.URL, APIKey: fake.MasterKey(), Attribution: port.Attribution{BillingAccountID: "acct-crash"}}
	}
	sa := spec("crash-count")
	sa.Budget = port.Budget{MaxCalls: budget}
	pa, err := m.StartProxy(ctx, sa)
	if err != nil {
		t.Fatal(err)
	}
	sb := spec("crash-attest")
	sb.RequireAttestation = true
	pb, err := m.StartProxy(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	ca := runHTTP(pa.Registration().SocketPath, pa.Registration().Token)
	cb := runHTTP(pb.Registration().SocketPath, pb.Registration().Token)

	// Run B's bridge attests a clean sandbox; its calls pass.
	clean := port.Attestation{Time: time.Now().UTC(), UID: 1001, GID: 1001, Interfaces: []string{"lo"}, CapEff: "0000000000000000",
		CapPrm: "0000000000000000", CapBnd: "0000000000000000", NoNewPrivs: true, Seccomp: 2, ReadOnlyRoot: true,
		OpenFiles: port.DefaultOpenFiles, PIDsMax: "256", Kernel: port.KernelLinux}
	if v := clean.Violations(); len(v) > 0 {
		t.Fatalf("the test's attestation is not clean: %v", v)
	}
	attest := func(a port.Attestation) int {
		b, _ := json.Marshal(a)
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox"+port.AttestationPath, strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(bridgeapi.AttestKeyHeader, pb.Socket().AttestKey) // what the runner hands its bridge
		resp, err := cb.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := attest(clean); st != http.StatusNoContent {
		t.Fatalf("the bridge's attestation: %d", st)
	}
	if st, _, err := call(ctx, cb); err != nil || st != 200 {
		t.Fatalf("attested run's call: %d %v", st, err)
	}

	// Run A's first call streams and is held at the upstream.
	first := make(chan struct{})
	streamDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://sandbox/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ca.Do(req)
		if err != nil {
			close(first)
			streamDone <- err
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		got := false
		for {
			line, err := br.ReadString('\n')
			if strings.HasPrefix(line, "data: ") && !got {
				got = true
				close(first)
			}
			if err != nil {
				if !got {
					close(first)
				}
				streamDone <- err
				return
			}
		}
	}()
	<-first
	d.stop(syscall.SIGKILL)
	if err := <-streamDone; err == nil {
		t.Error("the cut stream ended cleanly")
	}
	d.start()
	releaseOnce.Do(func() { close(release) })

	// Run A: the cut call counts; the upstream never sees more than the budget.
	ok := 0
	for i := 0; i < budget+2; i++ {
		st, _, err := call(ctx, ca)
		if err != nil {
			t.Fatalf("run A after restart: %v", err)
		}
		if st == 200 {
			ok++
		}
	}
	if n := upstreamCalls(sa.RunID); n > budget || ok != budget-1 {
		t.Errorf("after the crash the upstream saw %d calls of run A (budget %d); %d succeeded after the restart, want %d", n, budget, ok, budget-1)
	}
	// Run B keeps its attestation: calls pass, and no second report is taken.
	if st, _, err := call(ctx, cb); err != nil || st != 200 {
		t.Errorf("attested run's call after the restart: %d %v (its attestation was forgotten?)", st, err)
	}
	forged := clean
	forged.UID = 4242
	if st := attest(forged); st != http.StatusConflict {
		t.Errorf("a second attestation after the restart: %d, want 409", st)
	}
	if a, err := d.client.Attestation(ctx, pb.Registration().ID); err != nil || a == nil || a.UID != 1001 {
		t.Errorf("the daemon reports attestation %+v (%v), want the bridge's", a, err)
	}
	for _, p := range []*proxyd.Proxy{pa, pb} {
		if _, err := p.Stop(ctx); err != nil {
			t.Error(err)
		}
	}
}
