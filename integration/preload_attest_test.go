package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestPreloadAttestationDocker: a pre-booted runtime of a Docker warm pool cannot
// forge its sandbox's attestation, on the in-process proxy and the shared daemon
// (sandboxtest.TestPreloadAttestation). About 30 s.
func TestPreloadAttestationDocker(t *testing.T) { testPreloadAttestation(t, dockerRunnerFor) }

// TestPreloadAttestationContainerd is TestPreloadAttestationDocker on containerd's
// warm pools. About 30 s.
func TestPreloadAttestationContainerd(t *testing.T) {
	testPreloadAttestation(t, containerdRunnerFor)
}

func testPreloadAttestation(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	runner, image, node := nodePoolRunner(t, newRunner)
	inproc, _, _ := inprocHarness(t)
	daemon, _, _ := proxydHarnessParts(t)
	sandboxtest.TestPreloadAttestation(t, sandboxtest.PreloadAttestHarness{
		Pooler: runner.(port.Pooler), Image: image, Node: node,
		Fronts: map[string]port.ProxyManager{"inproc": inproc, "proxyd": daemon},
	})
}

// nodePoolRunner is a runner with the bridge and the Node.js test image.
func nodePoolRunner(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) (port.SandboxRunner, string, string) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin, func(ctx context.Context) (string, []byte, error) {
		return testimages.NodeArchive(ctx, node)
	})
	return runner, image, testimages.NodeBinary
}

// TestPreloadedForgerThroughRunDocker: the facade's promise, from the host's side:
// Run with RequireAttestation and a pool of pre-booted runtimes that forge their
// attestation gives the bridge's attestation in Result.Attestation, the agent's LLM
// call passes and Run returns no error. About 20 s.
func TestPreloadedForgerThroughRunDocker(t *testing.T) {
	testPreloadedForgerThroughRun(t, dockerRunnerFor)
}

// TestPreloadedForgerThroughRunContainerd is TestPreloadedForgerThroughRunDocker on
// containerd. About 20 s.
func TestPreloadedForgerThroughRunContainerd(t *testing.T) {
	testPreloadedForgerThroughRun(t, containerdRunnerFor)
}

func testPreloadedForgerThroughRun(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	runner, image, node := nodePoolRunner(t, newRunner)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := sandboxtest.NewAttestationForger(t, node)
	pool, err := runner.(port.Pooler).WarmPool(ctx, port.TemplateOf(f.Spec(image, "/")), port.PoolOptions{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(context.Background())
	fake := litellmtest.NewServer()
	defer fake.Close()
	inproc, _, _ := inprocHarness(t)
	daemon, _, _ := proxydHarnessParts(t)
	for _, front := range []struct {
		name    string
		proxies port.ProxyManager
	}{{"inproc", inproc}, {"proxyd", daemon}} {
		t.Run(front.name, func(t *testing.T) {
			sb, err := sandbox.New(runner, sandbox.WithPool(pool),
				sandbox.WithLLM(sandbox.LLM{Proxy: front.proxies, Upstream: fake.URL, APIKey: fake.MasterKey()}))
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(3 * time.Minute); pool.Stats().Ready < 1; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) || pool.Stats().PreloadFailed > 0 {
					t.Fatalf("the pre-booted slot never became ready: %+v", pool.Stats())
				}
			}
			spec := f.Spec(image, f.Workspace(t))
			res, err := sb.Run(ctx, sandbox.Request{
				Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("forge-run"), Image: image,
				Argv: spec.Argv, WorkspaceDir: spec.WorkspaceDir, Limits: spec.Limits, Preload: spec.Preload,
				RequireAttestation: true, Attribution: port.Attribution{BillingAccountID: "acct-forge"},
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Policy.AttestationRefused {
				t.Error("the run's calls were refused for want of an attestation")
			}
			f.Check(t, res.Run, res.Attestation)
		})
	}
}
