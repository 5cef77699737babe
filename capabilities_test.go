package sandbox

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// declaredProxy is a proxy manager that declares its capabilities.
type declaredProxy struct {
	fakeProxy
	caps port.ProxyCapabilities
}

func (d *declaredProxy) ProxyCapabilities() port.ProxyCapabilities { return d.caps }

// declaredRunner is a runner that declares its capabilities.
type declaredRunner struct {
	fakeRunner
	caps  port.RunnerCapabilities
	calls int
}

func (d *declaredRunner) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	d.calls++
	return d.fakeRunner.RunOnce(ctx, spec)
}

func (d *declaredRunner) RunnerCapabilities() port.RunnerCapabilities { return d.caps }

// TestUnsupportedRefusedBeforeAnySideEffect: a combination an adapter declares it
// cannot serve (nginx + RequireAttestation, egress on a manager without it, a
// budget, an internal network on a runner without networks) is refused with
// port.ErrUnsupported before the repository is cloned, the messages are written,
// the proxy is started or the runner is called.
func TestUnsupportedRefusedBeforeAnySideEffect(t *testing.T) {
	creds := port.CredentialFunc(func(context.Context, string, string, string) (string, error) { return "v", nil })
	nginx := port.ProxyCapabilities{} // what the Docker nginx manager declares (with WithUnfilteredBodies)
	full := port.ProxyCapabilities{Budget: true, Attestation: true, Egress: true, BodyPolicy: true}
	noNet := port.RunnerCapabilities{HostPaths: true, FractionalCPU: true}
	for name, tc := range map[string]struct {
		proxy  port.ProxyCapabilities
		runner port.RunnerCapabilities
		mut    func(*Request)
	}{
		"attestation on nginx": {nginx, noNet, func(r *Request) { r.RequireAttestation = true }},
		"budget on nginx":      {nginx, noNet, func(r *Request) { r.Budget.MaxCalls = 3 }},
		// (Egress on nginx: WithEgress with a manager without egress is refused by New;
		// see TestQuietMisconfigurationRefused.)
		// nginx made without WithUnfilteredBodies refuses every spec.
		"bodies on nginx unacknowledged": {port.ProxyCapabilities{BodiesRefused: true}, noNet, func(*Request) {}},
		"network on a runner without":    {full, noNet, func(r *Request) { r.Network = port.NetworkMode{Internal: "agents"} }},
		"fractional cpu":                 {full, port.RunnerCapabilities{HostPaths: true}, func(r *Request) { r.Limits.NanoCPUs = 1.5e9 }},
		"mounts without host paths": {full, port.RunnerCapabilities{WorkspaceCopy: true}, func(r *Request) {
			r.Mounts = []port.Mount{{Source: t.TempDir(), Target: "/data"}}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			relay := &fakeRelay{}
			p := &declaredProxy{caps: tc.proxy}
			r := &declaredRunner{fakeRunner: fakeRunner{res: &port.RunResult{}}, caps: tc.runner}
			opts := []Option{WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}), WithRepoRelay(relay)}
			if tc.proxy.Egress {
				opts = append(opts, WithEgress(creds, nil))
			}
			s, err := New(r, opts...)
			if err != nil {
				t.Fatal(err)
			}
			req := repoRequest(t)
			tc.mut(&req)
			before, err := os.ReadDir(req.WorkspaceDir)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(context.Background(), req)
			if !errors.Is(err, port.ErrUnsupported) || res != nil {
				t.Fatalf("Run = %+v, %v; want ErrUnsupported", res, err)
			}
			after, err := os.ReadDir(req.WorkspaceDir)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) {
				t.Errorf("workspace changed: %d entries before, %d after (clone or messages written)", len(before), len(after))
			}
			if p.started != 0 || r.calls != 0 {
				t.Errorf("proxy started %d times, runner called %d times", p.started, r.calls)
			}
		})
	}
	// The same request goes through where the adapters declare they can serve it.
	relay := &fakeRelay{}
	p := &declaredProxy{caps: full}
	r := &declaredRunner{fakeRunner: fakeRunner{res: &port.RunResult{}}, caps: port.RunnerCapabilities{HostPaths: true, InternalNetworks: true, FractionalCPU: true}}
	s, err := New(r, WithLLM(LLM{Proxy: p, Upstream: "http://127.0.0.1:4000", APIKey: "k"}), WithRepoRelay(relay))
	if err != nil {
		t.Fatal(err)
	}
	req := repoRequest(t)
	req.RequireAttestation, req.Budget.MaxCalls, req.Network, req.Limits.NanoCPUs = true, 3, port.NetworkMode{Internal: "agents"}, 1.5e9
	if _, err := s.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if p.started != 1 || r.calls != 1 {
		t.Errorf("proxy started %d times, runner called %d times", p.started, r.calls)
	}
}

// TestCapabilitiesDiscovered: the interface-backed fields come from the interfaces a
// runner implements, so a declaration cannot disagree with them.
func TestCapabilitiesDiscovered(t *testing.T) {
	c := port.RunnerCapabilities{Sweep: true, Pool: true, Runtime: "x"}.Discovered(&fakeRunner{})
	if c.Sweep || c.Pool || c.Sessions || !c.OOMExact || c.Runtime != "" {
		t.Errorf("discovered on a bare runner: %+v", c)
	}
}
