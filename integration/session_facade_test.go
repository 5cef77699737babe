package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestSessionFacadeDocker(t *testing.T)     { testSessionFacade(t, dockerRunner) }
func TestSessionFacadeContainerd(t *testing.T) { testSessionFacade(t, containerdRunner) }

// testSessionFacade: a session started through the facade makes LLM calls over
// several Execs, through one proxy with one budget; Stop returns the audit of all of
// them, the budget refusal, the attestation, and the calls reconciled against the
// (fake) LiteLLM's spend logs under the session's attribution. About 5 s per runtime.
func testSessionFacade(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)
	ws := newWorkspace(t)
	runID := sandboxtest.RunID("sessfacade")
	sess, err := sb.Start(ctx, sandbox.SessionRequest{Request: sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv:         []string{"/agent", "sleep", "600"},
		WorkspaceDir: ws, Model: "gpt-4o-mini",
		Messages:           []sandbox.Message{{Role: "user", Content: "session task"}},
		Attribution:        port.Attribution{BillingAccountID: "acct-session", UserID: "u-1"},
		Budget:             port.Budget{MaxCalls: 5},
		RequireAttestation: true,
		Limits:             port.Limits{Timeout: 5 * time.Minute},
		Reconcile:          true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = sess.Stop(context.Background(), time.Second)
		}
	}()
	// The messages file is in the workspace, as for a run.
	if b, err := sess.ReadFile(sandbox.DefaultMessagesFile, 0); err != nil || !strings.Contains(string(b), "session task") {
		t.Fatalf("messages file: %q %v", b, err)
	}
	// Three execs of two calls each: five pass, the sixth hits the budget.
	var out strings.Builder
	for i := 0; i < 3; i++ {
		r, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "calls", "2", "gpt-4o-mini"}, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		out.Write(r.Stdout)
	}
	if got := strings.Count(out.String(), "status 200"); got != 5 {
		t.Errorf("%d calls passed, want 5:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "status 429") {
		t.Errorf("no budget refusal in\n%s", out.String())
	}
	if live := sess.Audit(); len(live) != 6 {
		t.Errorf("live audit has %d records, want 6", len(live))
	}
	res, err := sess.Stop(ctx, time.Second)
	stopped = true
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if len(res.Audit) != 6 || !res.Policy.BudgetExceeded || len(res.Policy.Blocked) != 1 {
		t.Errorf("audit %d records, policy %+v", len(res.Audit), res.Policy)
	}
	if res.Attestation == nil || len(res.Attestation.Violations()) != 0 {
		t.Errorf("attestation %+v", res.Attestation)
	}
	if res.Usage == nil || res.Usage.Total.Calls != 5 || len(res.Usage.Missing) != 0 || res.Usage.Total.TotalTokens == 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	// Stop is idempotent.
	if again, err := sess.Stop(ctx, time.Second); again != res || err != nil {
		t.Errorf("second Stop: %p %v", again, err)
	}
	// Exec after Stop is refused.
	if _, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("exec after stop: %v", err)
	}
}
