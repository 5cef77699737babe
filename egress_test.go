package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

type egressFakeProxy struct{ fakeProxy }

func (f *egressFakeProxy) Start(ctx context.Context, spec port.ProxySpec) (port.Proxy, error) {
	_, _ = f.fakeProxy.Start(ctx, spec)
	return f, nil
}

func (f *egressFakeProxy) EgressAudit() []port.EgressRecord {
	return []port.EgressRecord{{RunID: "run-1", Mode: "mitm", Provider: "gh", Status: 200}}
}

func TestEgressPolicyReachesProxy(t *testing.T) {
	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return "v", nil })
	var live int
	p := &egressFakeProxy{}
	s, err := New(&fakeRunner{res: &port.RunResult{}}, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}),
		WithEgress(creds, func(port.EgressRecord) { live++ }))
	if err != nil {
		t.Fatal(err)
	}
	req := request(t)
	req.Egress = &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}, Credentials: []string{"token"}}}}
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := p.spec.Egress
	if got == nil || got.Credentials == nil || got.OnAudit == nil || got.Providers[0].ID != "gh" {
		t.Fatalf("proxy spec egress: %+v", got)
	}
	if req.Egress.Credentials != nil {
		t.Fatal("the caller's policy was modified")
	}
	if len(res.Egress) != 1 || res.Egress[0].Provider != "gh" {
		t.Fatalf("result egress: %+v", res.Egress)
	}

	// Without WithEgress (or without LLM access) a policy is refused before anything starts.
	p2 := &fakeProxy{}
	s2, _ := New(&fakeRunner{res: &port.RunResult{}}, WithLLM(LLM{Proxy: p2, Upstream: "http://127.0.0.1:4000", APIKey: "k"}))
	if _, err := s2.Run(context.Background(), req); !errors.Is(err, port.ErrInvalidSpec) || p2.started != 0 {
		t.Fatalf("err %v, started %d", err, p2.started)
	}
	// WithEgress without LLM access could serve no run: New refuses it.
	if _, err := New(&fakeRunner{res: &port.RunResult{}}, WithEgress(creds, nil)); !errors.Is(err, port.ErrInvalidSpec) {
		t.Fatalf("no LLM: %v", err)
	}
	// No policy: nothing changes.
	req.Egress = nil
	if _, err := s.Run(context.Background(), req); err != nil || p.spec.Egress != nil {
		t.Fatalf("no policy: %v %+v", err, p.spec.Egress)
	}
}
