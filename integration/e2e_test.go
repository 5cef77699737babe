package integration

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func dockerRunner(t testing.TB, bridgeBin string) (port.SandboxRunner, string) {
	return dockerRunnerFor(t, bridgeBin, sandboxtest.ProbeImage)
}

func containerdRunner(t testing.TB, bridgeBin string) (port.SandboxRunner, string) {
	return containerdRunnerFor(t, bridgeBin, sandboxtest.ProbeImage)
}

// imageFunc builds an image archive and its reference.
type imageFunc func(context.Context) (ref string, archive []byte, err error)

// newStack is the facade as a host composes it: in-process per-run proxies in front of
// the fake LiteLLM, and a reconciler reading its spend logs. Everything is released
// when the test ends.
func newStack(t testing.TB, runner port.SandboxRunner, fake *litellmtest.Server, opts ...sandbox.Option) (*sandbox.Sandbox, *litellm.Client) {
	t.Helper()
	base, err := os.MkdirTemp("", "e2e-proxy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	proxies, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("e2e")), inprocproxy.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxies.Shutdown(context.Background()) })
	lc, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := litellmspend.NewReconciler(lc, litellmspend.WithPollInterval(100*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(runner, append([]sandbox.Option{sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: fake.URL, APIKey: fake.MasterKey()}), sandbox.WithReconciler(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return sb, lc
}

func dockerRunnerFor(t testing.TB, bridgeBin string, image imageFunc) (port.SandboxRunner, string) {
	ctx := context.Background()
	cli := dockerClient(t)
	ref, archive, err := image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	r, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bridgeBin), docker.WithOwner(testenv.Owner("e2e")))
	if err != nil {
		t.Fatal(err)
	}
	return r, ref
}

func containerdRunnerFor(t testing.TB, bridgeBin string, image imageFunc) (port.SandboxRunner, string) {
	ctx := context.Background()
	r, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bridgeBin), containerd.WithOwner(testenv.Owner("e2e")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	perr := r.Ping(ctx)
	testenv.Need(t, "containerd", perr == nil, "no containerd reachable")
	ref, archive, err := image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	return r, ref
}

func TestReconciledRunDocker(t *testing.T)     { testReconciledRun(t, dockerRunner) }
func TestReconciledRunContainerd(t *testing.T) { testReconciledRun(t, containerdRunner) }

// testReconciledRun: an agent makes N calls through the proxy; the reconciled totals
// equal what the fake LiteLLM billed for this run, and nothing of a concurrent run of
// the same account is counted.
func testReconciledRun(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(500 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)

	// Another run of the same account, billed in the same window, must not be counted.
	other := sandboxtest.RunID("other")
	fake.AddSpendRows(litellmtest.SpendRow{
		RequestID: "chatcmpl-other", LitellmCallID: "call-other", EndUser: "acct-e2e", Model: "gpt-4o-mini",
		Spend: 1.5, TotalTokens: 1000, PromptTokens: 600, CompletionTokens: 400,
		StartTime: time.Now(), EndTime: time.Now(),
		Metadata: map[string]any{"spend_logs_metadata": map[string]any{"run_id": other, "attempt": 0}},
	})

	const calls = 4
	ws := newWorkspace(t)
	runID := sandboxtest.RunID("e2e")
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv:         []string{"/agent", "calls", "4", "gpt-4o-mini"},
		WorkspaceDir: ws, Model: "gpt-4o-mini",
		Attribution:        port.Attribution{BillingAccountID: "acct-e2e", UserID: "u1"},
		Reconcile:          true,
		RequireAttestation: true,
	})
	if err != nil {
		t.Fatalf("Run: %v (result %+v)", err, res)
	}
	// The run's LLM access was gated on the sandbox's own report of its isolation,
	// which the result carries.
	if res.Attestation == nil || len(res.Attestation.Violations()) != 0 || res.Attestation.Interfaces[0] != "lo" {
		t.Errorf("attestation %+v", res.Attestation)
	}
	if got := strings.Count(string(res.Run.Stdout), "status 200"); got != calls {
		t.Fatalf("%d of %d calls succeeded: %s %s", got, calls, res.Run.Stdout, res.Run.Stderr)
	}
	if len(res.Audit) != calls {
		t.Fatalf("audit has %d records, want %d", len(res.Audit), calls)
	}
	// What the fake billed for this run.
	var want port.Usage
	for _, r := range fake.SpendRows() {
		md, _ := r.Metadata["spend_logs_metadata"].(map[string]any)
		if md["run_id"] != runID {
			continue
		}
		want.Calls++
		want.PromptTokens += int64(r.PromptTokens)
		want.CompletionTokens += int64(r.CompletionTokens)
		want.TotalTokens += int64(r.TotalTokens)
		want.Spend += r.Spend
	}
	got := res.Usage.Total
	if want.Calls != calls || got.Calls != want.Calls || got.TotalTokens != want.TotalTokens ||
		got.PromptTokens != want.PromptTokens || got.CompletionTokens != want.CompletionTokens || math.Abs(got.Spend-want.Spend) > 1e-12 {
		t.Errorf("reconciled %+v, billed %+v", got, want)
	}
	if len(res.Usage.Missing) != 0 {
		t.Errorf("missing calls: %v", res.Usage.Missing)
	}
	keys := map[string]bool{}
	for _, f := range res.Usage.Facts {
		if !strings.HasPrefix(f.IdempotencyKey, runID+"/0/") || keys[f.IdempotencyKey] {
			t.Errorf("bad or duplicate idempotency key %q", f.IdempotencyKey)
		}
		keys[f.IdempotencyKey] = true
	}
}
