package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestQuietMisconfigurationRefused lists every combination of options and request
// fields the facade once accepted and then ignored (the run went on as if it had
// not been given), or that contradict each other: each is now refused with
// ErrInvalidSpec naming what to change, before any runner, proxy or relay is
// called. Found by reading Request, SessionRequest and every Option; the rows
// marked "was refused" were refused before, with a message that named no field.
func TestQuietMisconfigurationRefused(t *testing.T) {
	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return "v", nil })
	llm := func(p port.ProxyManager) Option {
		return WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"})
	}
	egress := &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}}}}
	type sandboxOpts func(p port.ProxyManager) []Option
	noLLM := func(port.ProxyManager) []Option { return nil }
	withLLM := func(p port.ProxyManager) []Option { return []Option{llm(p), WithReconciler(&fakeReconciler{})} }

	// Options New refuses whatever the request.
	for name, tc := range map[string]struct {
		opts sandboxOpts
		want string
	}{
		"reconciler without LLM access": {func(port.ProxyManager) []Option { return []Option{WithReconciler(&fakeReconciler{})} }, "WithReconciler without LLM access"},
		"reconcile timeout without a reconciler": {func(p port.ProxyManager) []Option { return []Option{llm(p), WithReconcileTimeout(1)} },
			"WithReconcileTimeout without a reconciler"},
		"egress without LLM access": {func(port.ProxyManager) []Option { return []Option{WithEgress(creds, nil)} }, "WithEgress without LLM access"},
		"egress on a proxy manager without egress": {func(port.ProxyManager) []Option {
			return []Option{llm(&declaredProxy{caps: port.ProxyCapabilities{Budget: true}}), WithEgress(creds, nil)}
		}, "WithEgress with a proxy manager that has no egress front"},
		"model variable without LLM access":   {func(port.ProxyManager) []Option { return []Option{WithModelEnv("AGENT_MODEL")} }, "WithModelEnv without LLM access"},
		"pull requester without a repo relay": {func(port.ProxyManager) []Option { return []Option{WithPullRequester(&fakePRs{})} }, "WithPullRequester without WithRepoRelay"},
	} {
		t.Run("New/"+name, func(t *testing.T) {
			_, err := New(&fakeRunner{}, tc.opts(&fakeProxy{})...)
			if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want ErrInvalidSpec saying %q", err, tc.want)
			}
		})
	}

	// Requests Run and Start refuse.
	for name, tc := range map[string]struct {
		opts    sandboxOpts
		mut     func(*Request)
		session bool
		want    string
	}{
		"model without LLM access":       {noLLM, func(r *Request) { r.Model = "m" }, false, "Request.Model asks for LLM access"},
		"attribution without LLM access": {noLLM, func(r *Request) { r.Attribution.BillingAccountID = "acct" }, false, "Request.Attribution asks for LLM access"},
		"budget without LLM access":      {noLLM, func(r *Request) { r.Budget.MaxCalls = 3 }, false, "Request.Budget asks for LLM access"},
		"fail on budget without LLM":     {noLLM, func(r *Request) { r.FailOnBudget = true }, false, "Request.FailOnBudget asks for LLM access"},
		"fail on upstream without LLM":   {noLLM, func(r *Request) { r.FailOnUpstream = true }, false, "Request.FailOnUpstream asks for LLM access"},
		"attestation without LLM access": {noLLM, func(r *Request) { r.RequireAttestation = true }, false, "Request.RequireAttestation asks for LLM access"},
		"own bridge without LLM access":  {noLLM, func(r *Request) { r.OwnBridge = true }, false, "Request.OwnBridge asks for LLM access"},
		// was refused, naming neither field nor fix:
		"reconcile without LLM access":       {noLLM, func(r *Request) { r.Reconcile = true }, false, "Request.Reconcile asks for LLM access"},
		"reconcile async without LLM access": {noLLM, func(r *Request) { r.ReconcileAsync = true }, false, "Request.ReconcileAsync asks for LLM access"},
		"egress without LLM access":          {noLLM, func(r *Request) { r.Egress = egress }, false, "Request.Egress asks for LLM access"},
		"reconcile without a reconciler": {func(p port.ProxyManager) []Option { return []Option{llm(p)} }, func(r *Request) { r.Reconcile = true }, false,
			"Request.Reconcile or ReconcileAsync without a reconciler"},
		"both reconcile modes": {withLLM, func(r *Request) { r.Reconcile, r.ReconcileAsync = true, true }, false,
			"Request.Reconcile and ReconcileAsync together"},
		"fail on budget without a budget": {withLLM, func(r *Request) { r.FailOnBudget = true }, false, "Request.FailOnBudget without a Budget"},
		"model without LLM in a session":  {noLLM, func(r *Request) { r.Model = "m" }, true, "Request.Model asks for LLM access"},
		"both reconcile modes in a session": {withLLM, func(r *Request) { r.Reconcile, r.ReconcileAsync = true, true }, true,
			"Request.Reconcile and ReconcileAsync together"},
		"output limit in a session": {noLLM, func(r *Request) { r.OutputLimit = 4096 }, true, "SessionRequest.OutputLimit"},
		"preload in a session":      {noLLM, func(r *Request) { r.Preload = &port.Preload{Argv: []string{"/preload"}} }, true, "SessionRequest.Preload"},
	} {
		t.Run("Run/"+name, func(t *testing.T) {
			p := &fakeProxy{}
			r := &fakeSessionRunner{}
			s, err := New(r, tc.opts(p)...)
			if err != nil {
				t.Fatal(err)
			}
			req := request(t)
			if len(tc.opts(p)) > 0 {
				req = llmRequest(t)
			}
			tc.mut(&req)
			if tc.session {
				_, err = s.Start(context.Background(), SessionRequest{Request: req})
			} else {
				_, err = s.Run(context.Background(), req)
			}
			if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrInvalidSpec saying %q", err, tc.want)
			}
			if p.started != 0 || r.got.RunID != "" || r.spec.RunID != "" {
				t.Errorf("something started: proxy %d, runner %q, session %q", p.started, r.got.RunID, r.spec.RunID)
			}
		})
	}
}
