package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestProxydFacadeRunDocker(t *testing.T)     { testProxydFacadeRun(t, dockerRunner) }
func TestProxydFacadeRunContainerd(t *testing.T) { testProxydFacadeRun(t, containerdRunner) }

// testProxydFacadeRun is the facade's whole run with the shared daemon as its
// proxy manager: attestation-gated calls through the bridge in token mode, the
// audit from the daemon, usage reconciled against the fake LiteLLM.
func testProxydFacadeRun(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	fake := litellmtest.NewServer()
	defer fake.Close()
	d := startProxyd(t)
	proxies, err := proxyd.NewManager(d.client, proxyd.WithSandboxUID(1001))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := litellmspend.NewReconciler(lc, litellmspend.WithPollInterval(100*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(runner, sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: fake.URL, APIKey: fake.MasterKey()}), sandbox.WithReconciler(rec))
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	const calls = 3
	runID := sandboxtest.RunID("pxd-e2e")
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv: []string{"/agent", "calls", "3", "gpt-4o-mini"}, WorkspaceDir: ws, Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-pxd", UserID: "u1"},
		Reconcile:   true, RequireAttestation: true,
	})
	if err != nil {
		t.Fatalf("Run: %v (result %+v)", err, res)
	}
	if res.Attestation == nil || len(res.Attestation.Violations()) != 0 {
		t.Errorf("attestation %+v", res.Attestation)
	}
	if got := strings.Count(string(res.Run.Stdout), "status 200"); got != calls {
		t.Fatalf("%d of %d calls succeeded: %s %s", got, calls, res.Run.Stdout, res.Run.Stderr)
	}
	if len(res.Audit) != calls {
		t.Fatalf("audit has %d records, want %d", len(res.Audit), calls)
	}
	for _, a := range res.Audit {
		if a.RunID != runID || a.Status != 200 || a.CallID == "" {
			t.Errorf("audit record %+v", a)
		}
	}
	if res.Usage.Total.Calls != calls || len(res.Usage.Missing) != 0 {
		t.Errorf("reconciled %+v, missing %v", res.Usage.Total, res.Usage.Missing)
	}
	if left, _ := d.leftovers(ctx, runID); len(left) != 0 {
		t.Errorf("the daemon still holds %v", left)
	}

	// Canary: neither the daemon's token secret nor the key is anywhere the agent
	// can look (env, files, /proc), although the run's token is in its socket directory.
	secret, err := os.ReadFile(filepath.Join(d.dir, "state", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	hexSecret := strings.TrimSpace(string(secret))
	p, err := proxies.StartProxy(ctx, port.ProxySpec{RunID: runID + "-scan", Upstream: fake.URL, APIKey: fake.MasterKey(),
		Attribution: port.Attribution{BillingAccountID: "acct-pxd"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	sock := p.Socket()
	for name, canary := range map[string]string{"token secret": hexSecret, "api key": fake.MasterKey()} {
		scan, err := runner.RunOnce(ctx, port.RunSpec{RunID: runID + "-scan", Image: image, LLM: &sock,
			Argv: []string{"/agent", "scan", canary[:len(canary)/2], canary[len(canary)/2:]}})
		if err != nil {
			t.Fatal(err)
		}
		if scan.ExitCode != 0 || strings.TrimSpace(string(scan.Stdout)) != "clean" {
			t.Errorf("the %s is visible in the sandbox: exit %d %s", name, scan.ExitCode, scan.Stdout)
		}
	}
	tok, err := runner.RunOnce(ctx, port.RunSpec{RunID: runID + "-scan", Image: image, LLM: &sock,
		Argv: []string{"/agent", "cat", port.LLMSocketDir + "/" + proxyd.TokenFile}})
	if err != nil || !strings.Contains(string(tok.Stdout), p.Registration().Token) {
		t.Errorf("the run token is not in the sandbox's socket directory: %v %s", err, tok.Stdout)
	}
}
