package warmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
	"github.com/agentsandbox/sandbox/port"
)

// fakeSlot is a pooled sandbox of a poolRig: n is its number, exit its end.
type fakeSlot struct {
	Slot
	n    int64
	exit chan int
}

// poolRig is a Pool of fake slots whose steps record what the pool asked of them.
type poolRig struct {
	fakes
	p       *Pool[*fakeSlot, int]
	made    []port.RunSpec
	slots   map[int64]*fakeSlot
	outcome Result // what Run returns (Gone, Broken)
	ran     []int64
	cold    []string // the runs sent to the cold path
	claims  []bool   // Claimed's calls
	closed  int
}

func newPoolRig(t *testing.T, tmpl port.PoolTemplate, h Host[*fakeSlot, int]) (*poolRig, error) {
	t.Helper()
	g := &poolRig{slots: map[int64]*fakeSlot{}}
	dir := t.TempDir()
	h.Admission = Admission{Bridge: true, LateMounts: true, Runtime: "runc", Check: func(port.RunSpec) error { return nil }, DefaultRefill: 1}
	h.Steps = Steps[*fakeSlot, int]{
		Slot: func() (*fakeSlot, string) {
			n := g.next.Add(1)
			s := &fakeSlot{Slot: Slot{Dir: filepath.Join(dir, strconv.FormatInt(n, 10))}, n: n, exit: make(chan int, 1)}
			g.mu.Lock()
			g.slots[n] = s
			g.mu.Unlock()
			return s, strconv.FormatInt(n, 10)
		},
		Image: func(context.Context, *fakeSlot) error { return nil },
		Make: func(_ context.Context, s *fakeSlot, spec port.RunSpec, lbls map[string]string, stub Stub) error {
			if lbls[LabelSlotDir] != s.Dir || lbls[LabelPool] != tmpl.Key() || stub.Argv[0] != "/bridge" {
				return fmt.Errorf("made with labels %v, stub %v", lbls, stub.Argv)
			}
			g.mu.Lock()
			g.made = append(g.made, spec)
			g.mu.Unlock()
			return nil
		},
		Exit:    func(s *fakeSlot) <-chan int { return s.exit },
		Code:    func(c int) int { return c },
		Destroy: g.remove,
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
		Run: func(_ context.Context, _ *Claim, s *fakeSlot) (*Result, error) {
			g.ran = append(g.ran, s.n)
			out := g.outcome
			out.RunResult = &port.RunResult{Start: port.StartWarm}
			return &out, nil
		},
		Claimed: func(_ context.Context, warm bool) { g.claims = append(g.claims, warm) },
		Closed:  func() { g.closed++ },
	}
	h.Engine, h.Owner, h.Bridge = "fake", "warmpool-test", "/bridge"
	h.Base, h.CleanupTimeout, h.Cleanup = context.Background(), 10*time.Second, bgclean.New(2)
	h.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := NewPool(tmpl, port.PoolOptions{Size: 1}, h)
	g.p = p
	return g, err
}

func (g *poolRig) remove(s *fakeSlot) {
	s.ReleaseLeases()
	g.destroy(s.n)
}

func (g *poolRig) ready(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.p.Stats().Ready != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never got ready: %+v", g.p.Stats())
		}
	}
}

func TestPoolRoutesRuns(t *testing.T) {
	spec := port.RunSpec{RunID: "r", Image: "img", Argv: []string{"a"}}.WithDefaults()
	g, err := newPoolRig(t, port.TemplateOf(spec), Host[*fakeSlot, int]{Supported: true})
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
	// A sandbox that ended before its claim is dropped: the run takes the next one,
	// or runs cold when there is none yet.
	g.ready(t)
	g.mu.Lock()
	s := g.slots[g.next.Load()] // the one ready: the last made
	g.mu.Unlock()
	s.exit <- 137
	if res := run("ended", spec); res.Start == port.StartCold && res.StartNote != "the pool was empty" {
		t.Errorf("a run offered an ended sandbox: %+v", res)
	}
	for _, n := range g.ran {
		if n == s.n {
			t.Errorf("a run went to the sandbox that had ended")
		}
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

	st := g.p.Stats()
	if st.Warm+st.Cold != 4 || st.Other != 1 || st.Failed != 2 || st.PreloadFailed != 1 || st.Warm != int64(len(g.ran)) {
		t.Errorf("Stats = %+v after 4 runs of the shape (%d warm) and 1 other, 1 ended and 1 broken sandbox, 1 runtime gone", st, len(g.ran))
	}
	cold := strings.Join(g.cold, ",")
	if cold != "other,ended,broken,gone" && cold != "other,broken,gone" {
		t.Errorf("cold runs: %v", g.cold)
	}
	if len(g.claims) != 4 || !g.claims[0] || !g.claims[2] || !g.claims[3] {
		t.Errorf("Claimed calls: %v (want warm, either, warm, warm)", g.claims)
	}
	if err := g.p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every slot made was removed: the ones run in and the one ended before its claim
	// (discarded), and the one still ready (drained).
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := g.next.Load(); len(g.destroyed) != int(n) || len(g.made) != int(n) {
		t.Errorf("%d slots made (%d through Make), %d removed", n, len(g.made), len(g.destroyed))
	}
	if len(g.made) > 0 && g.made[0].RunID != "pool-1" {
		t.Errorf("the first slot was made for run %q, want pool-1", g.made[0].RunID)
	}
	if err := g.p.Close(context.Background()); err != nil || g.closed != 1 {
		t.Errorf("second Close: %v, Closed ran %d times", err, g.closed)
	}
}

func TestPoolRefusals(t *testing.T) {
	spec := port.RunSpec{RunID: "r", Image: "img", Argv: []string{"a"}}
	_, err := newPoolRig(t, port.TemplateOf(spec), Host[*fakeSlot, int]{})
	if !errors.Is(err, port.ErrUnsupported) || err.Error() != "fake.WarmPool: unsupported: warm pools need Linux mount propagation" {
		t.Errorf("a host without mount propagation: %v", err)
	}
	g, err := newPoolRig(t, port.TemplateOf(spec), Host[*fakeSlot, int]{Supported: true})
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
