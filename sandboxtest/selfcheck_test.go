package sandboxtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// The suite's own bookkeeping, checked against fakes (as testing/fstest checks
// itself): a correct fake passes a case, and a faulty one (a runner that accepts
// bad input, leaves resources behind, or does what it declared it cannot) makes the
// case fail with a message that names the fault. A failing case fails its test, so
// the faulty fakes run in a child process of this test binary.

// fakeRunner is a runner that runs nothing: it validates specs as a runner must
// (unless lax) and records what it "holds" per run (when leaky).
type fakeRunner struct {
	lax, leaky bool

	mu    sync.Mutex
	calls int
	held  map[string][]string
}

func (f *fakeRunner) RunOnce(_ context.Context, spec port.RunSpec) (*port.RunResult, error) {
	spec = spec.WithDefaults()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if !f.lax {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		if err := spec.CheckHostPaths(); err != nil {
			return nil, err
		}
	}
	if f.leaky {
		if f.held == nil {
			f.held = map[string][]string{}
		}
		f.held[spec.RunID] = append(f.held[spec.RunID], "container:"+spec.RunID)
	}
	return &port.RunResult{}, nil
}

func (f *fakeRunner) leftovers(_ context.Context, runID string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.held[runID]...), nil
}

// declaringRunner declares caps; it refuses what they exclude unless it breaks
// its word.
type declaringRunner struct {
	*fakeRunner
	caps      port.RunnerCapabilities
	breakWord bool
}

func (d *declaringRunner) RunnerCapabilities() port.RunnerCapabilities { return d.caps }

func (d *declaringRunner) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	if !d.breakWord {
		if err := d.caps.Check(spec); err != nil {
			return nil, err
		}
	}
	return d.fakeRunner.RunOnce(ctx, spec)
}

func fakeSuite(r port.SandboxRunner, left func(context.Context, string) ([]string, error)) *suite {
	return &suite{h: RunnerHarness{Runner: r, Image: "fake/probe:1", Leftovers: left}}
}

func TestRunIDsAreValidAndFresh(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := RunID("pt-x")
		if err := port.ValidateRunID(id); err != nil || !strings.HasPrefix(id, "pt-x-") || seen[id] {
			t.Fatalf("RunID = %q (%v), seen before: %v", id, err, seen[id])
		}
		seen[id] = true
	}
	s := fakeSuite(&fakeRunner{}, nil)
	if err := s.spec("Name", "id").WithDefaults().Validate(); err != nil {
		t.Errorf("the suite's base spec is invalid: %v", err)
	}
}

func TestInvalidSpecCasePassesACorrectRunner(t *testing.T) {
	f := &fakeRunner{leaky: true}
	testInvalidSpec(t, fakeSuite(f, f.leftovers))
	if len(f.held) != 0 {
		t.Errorf("the fake created %v for invalid specs", f.held)
	}
}

func TestDeclaredRefusalsPassACorrectRunner(t *testing.T) {
	f := &fakeRunner{leaky: true}
	d := &declaringRunner{fakeRunner: f} // declares nothing: four refusals
	testDeclaredRefusals(t, fakeSuite(d, f.leftovers))
	if f.calls != 0 || len(f.held) != 0 {
		t.Errorf("refused specs reached the runner: %d calls, holding %v", f.calls, f.held)
	}
}

// fakeManager is a proxy manager that declares no capabilities and refuses what
// it cannot do (or, breaking its word, starts a proxy anyway).
type fakeManager struct {
	breakWord bool
	started   int
}

func (m *fakeManager) ProxyCapabilities() port.ProxyCapabilities { return port.ProxyCapabilities{} }

func (m *fakeManager) Start(_ context.Context, spec port.ProxySpec) (port.Proxy, error) {
	if !m.breakWord {
		if err := m.ProxyCapabilities().Check(spec); err != nil {
			return nil, err
		}
	}
	m.started++
	return fakeProxy{}, nil
}

type fakeProxy struct{}

func (fakeProxy) Socket() port.LLMSocket                           { return port.LLMSocket{HostDir: "/nonexistent"} }
func (fakeProxy) Stop(context.Context) ([]port.AuditRecord, error) { return nil, nil }

func noLeftovers(context.Context, string) ([]string, error) { return nil, nil }

func TestProxyDeclaredRefusalsPassACorrectManager(t *testing.T) {
	m := &fakeManager{}
	testProxyDeclaredRefusals(t, ProxyHarness{Manager: m, Leftovers: noLeftovers})
	if m.started != 0 {
		t.Errorf("%d refused specs started a proxy", m.started)
	}
}

// selfCheckEnv names the faulty fake a child process runs the suite against.
const selfCheckEnv = "SANDBOXTEST_SELFCHECK"

// TestSelfCheckChild is the child: it does its work only when the parent sets
// selfCheckEnv, and is expected to fail then.
func TestSelfCheckChild(t *testing.T) {
	switch os.Getenv(selfCheckEnv) {
	case "lax":
		f := &fakeRunner{lax: true}
		testInvalidSpec(t, fakeSuite(f, f.leftovers))
	case "leaky":
		// A runner that leaves a container behind after every run.
		f := &fakeRunner{leaky: true}
		s := fakeSuite(f, f.leftovers)
		_, _ = s.run(t, context.Background(), s.spec("leak", "id"))
	case "broken-word":
		f := &fakeRunner{}
		testDeclaredRefusals(t, fakeSuite(&declaringRunner{fakeRunner: f, breakWord: true}, f.leftovers))
	case "proxy-broken-word":
		testProxyDeclaredRefusals(t, ProxyHarness{Manager: &fakeManager{breakWord: true}, Leftovers: noLeftovers})
	case "runner-harness":
		TestRunner(t, RunnerHarness{})
	case "proxy-harness":
		TestProxyManager(t, ProxyHarness{})
	}
}

func TestSuiteCatchesFaults(t *testing.T) {
	for mode, want := range map[string][]string{
		"lax":               {"want ErrInvalidSpec and no result", "run id with slash", "image with whitespace"},
		"leaky":             {"left resources behind", "container:pt-leak-"},
		"broken-word":       {"internal network: RunOnce", "want ErrUnsupported", "fractional cpu"},
		"proxy-broken-word": {"budget: Start = <nil>, want ErrUnsupported", "egress: Start"},
		"runner-harness":    {"RunnerHarness needs Runner, Image and Leftovers"},
		"proxy-harness":     {"ProxyHarness needs Manager, Runner, Image, Kill and Leftovers"},
	} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSelfCheckChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), selfCheckEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("the suite passed a faulty fake (%v):\n%s", err, out)
			}
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the failure does not say %q:\n%s", w, out)
				}
			}
		})
	}
}
