package warmpool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/port"
)

// poolRig is a Pool of ints whose steps record what the pool asked of them.
type poolRig struct {
	fakes
	p       *Pool[int64]
	ended   map[int64]bool // sandboxes that ended before their claim
	outcome Result         // what Run returns (Gone, Broken)
	ran     []int64
	cold    []string // the runs sent to the cold path
	claims  []bool   // Claimed's calls
	closed  int
}

func newPoolRig(t *testing.T, tmpl port.PoolTemplate, h Host[int64]) (*poolRig, error) {
	t.Helper()
	g := &poolRig{ended: map[int64]bool{}}
	h.Admission = Admission{Bridge: true, LateMounts: true, Runtime: "runc", Check: func(port.RunSpec) error { return nil }, DefaultRefill: 1}
	h.Steps = Steps[int64]{
		New: func() (int64, error) { return g.next.Add(1), nil }, Destroy: g.destroy,
		Ended: func(s int64) (int, bool) { return 0, g.ended[s] },
		Check: func(_ context.Context, spec port.RunSpec) error {
			if spec.Argv[0] == "refused" {
				return port.Invalidf("refused")
			}
			return nil
		},
		Cold: func(_ context.Context, spec port.RunSpec) (*port.RunResult, error) {
			g.cold = append(g.cold, spec.RunID)
			return &port.RunResult{}, nil
		},
		Run: func(_ context.Context, _ port.RunSpec, s int64) (*Result, error) {
			g.ran = append(g.ran, s)
			out := g.outcome
			out.RunResult = &port.RunResult{Start: port.StartWarm}
			return &out, nil
		},
		Claimed: func(_ context.Context, warm bool) { g.claims = append(g.claims, warm) },
		Closed:  func() { g.closed++ },
	}
	h.Engine, h.Base, h.Cleanup = "fake", context.Background(), bgclean.New(2)
	h.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := NewPool(tmpl, port.PoolOptions{Size: 1}, h)
	g.p = p
	return g, err
}

func (g *poolRig) ready(t *testing.T) {
	t.Helper()
	waitStats(t, g.p.k, func(s port.PoolStats) bool { return s.Ready == 1 })
}

func TestPoolRoutesRuns(t *testing.T) {
	spec := port.RunSpec{RunID: "r", Image: "img", Argv: []string{"a"}}.WithDefaults()
	g, err := newPoolRig(t, port.TemplateOf(spec), Host[int64]{Supported: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.p.Start(func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	g.ready(t)
	run := func(id string, s port.RunSpec) *port.RunResult {
		t.Helper()
		s.RunID = id
		res, err := g.p.RunOnce(context.Background(), s)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return res
	}

	if res := run("warm", spec); res.Start != port.StartWarm || len(g.ran) != 1 {
		t.Errorf("a run of the pool's shape: %+v, ran %v", res, g.ran)
	}
	other := spec
	other.Image = "other"
	if res := run("other", other); res.Start != port.StartCold || res.StartNote != "no pool of the run's shape" {
		t.Errorf("a run of another shape: %+v", res)
	}
	// A sandbox that ended before its claim is dropped; with none left the run is cold.
	g.ready(t)
	g.ended[g.next.Load()] = true
	if res := run("ended", spec); res.StartNote != "the pool was empty" {
		t.Errorf("a run offered an ended sandbox: %+v", res)
	}
	g.ready(t)
	g.outcome = Result{Broken: "shim frozen"}
	if res := run("broken", spec); res.StartNote != "the pooled sandbox could not be started at the claim: shim frozen" {
		t.Errorf("a run in a broken sandbox: %+v", res)
	}
	g.ready(t)
	g.outcome = Result{Gone: "runtime died"}
	if res := run("gone", spec); res.StartNote != "the pre-booted runtime was gone at the claim: runtime died" {
		t.Errorf("a run whose runtime was gone: %+v", res)
	}
	refused := spec
	refused.Argv = []string{"refused"}
	if _, err := g.p.RunOnce(context.Background(), refused); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "fake.RunOnce") {
		t.Errorf("a refused run: %v", err)
	}

	want := port.PoolStats{Ready: g.p.Stats().Ready, Warm: 3, Cold: 1, Other: 1, Failed: 2, PreloadFailed: 1}
	if st := g.p.Stats(); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	if strings.Join(g.cold, ",") != "other,ended,broken,gone" {
		t.Errorf("cold runs: %v", g.cold)
	}
	if len(g.claims) != 4 || g.claims[1] {
		t.Errorf("Claimed calls: %v (want warm, cold, warm, warm)", g.claims)
	}
	if err := g.p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.p.Close(context.Background()); err != nil || g.closed != 1 {
		t.Errorf("second Close: %v, Closed ran %d times", err, g.closed)
	}
}

func TestPoolRefusals(t *testing.T) {
	spec := port.RunSpec{RunID: "r", Image: "img", Argv: []string{"a"}}
	_, err := newPoolRig(t, port.TemplateOf(spec), Host[int64]{})
	if !errors.Is(err, port.ErrUnsupported) || err.Error() != "fake.WarmPool: unsupported: warm pools need Linux mount propagation" {
		t.Errorf("a host without mount propagation: %v", err)
	}
	g, err := newPoolRig(t, port.TemplateOf(spec), Host[int64]{Supported: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.p.Start(func() bool { return false }); !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), "the runner is closed") {
		t.Errorf("a closed runner: %v", err)
	}
	if err := g.p.Close(context.Background()); err != nil || g.closed != 0 {
		t.Errorf("Close of a refused pool: %v, Closed ran %d times", err, g.closed)
	}
}
