package warmpool

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// fakes counts what a Keeper does with its sandboxes (ints).
type fakes struct {
	next      atomic.Int64
	mu        sync.Mutex
	destroyed []int64
	fail      error
}

func (f *fakes) keeper(size, conc int) *Keeper[int64] {
	return New(context.Background(), Config[int64]{
		Key: "k", Size: size, Concurrency: conc,
		New: func() (int64, error) {
			if f.fail != nil {
				return 0, f.fail
			}
			return f.next.Add(1), nil
		},
		Destroy: f.destroy, Discard: f.destroy,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

func (f *fakes) destroy(s int64) {
	f.mu.Lock()
	f.destroyed = append(f.destroyed, s)
	f.mu.Unlock()
}

// waitStats polls until ok(stats): a readiness wait, not a timing assertion.
func waitStats(t *testing.T, k *Keeper[int64], ok func(port.PoolStats) bool) port.PoolStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := k.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the condition: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeeperFillsTakesAndDrains(t *testing.T) {
	f := &fakes{}
	k := f.keeper(3, 2)
	k.Start()
	waitStats(t, k, func(s port.PoolStats) bool { return s.Ready == 3 })
	// An ended sandbox is counted failed, discarded and skipped; the next is taken.
	first := true
	s, ok := k.Take(func(int64) bool { e := first; first = false; return e })
	if !ok || s == 0 {
		t.Fatalf("Take = %d, %v", s, ok)
	}
	if st := k.Stats(); st.Failed != 1 {
		t.Errorf("Failed = %d, want 1 (the ended one)", st.Failed)
	}
	// The pool refills to its size after the two takes.
	waitStats(t, k, func(s port.PoolStats) bool { return s.Ready == 3 })
	if !k.Stop() || k.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	if err := k.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Destroyed: the ended one and the three ready at Stop; never the taken one.
	if len(f.destroyed) != 4 {
		t.Errorf("destroyed %v, want 4", f.destroyed)
	}
	for _, d := range f.destroyed {
		if d == s {
			t.Errorf("the taken sandbox %d was destroyed", s)
		}
	}
	if len(k.Ready) != 0 {
		t.Errorf("%d still ready after Drain", len(k.Ready))
	}
}

// TestKeeperRefillsBetweenRuns: a pool refilling between runs creates nothing while
// a run it served is in progress, and refills once the run is done.
func TestKeeperRefillsBetweenRuns(t *testing.T) {
	f := &fakes{}
	k := f.keeper(1, 1)
	k.cfg.BetweenRuns = true
	k.Start()
	defer func() { k.Stop(); _ = k.Drain(context.Background()) }()
	waitStats(t, k, func(s port.PoolStats) bool { return s.Ready == 1 })
	if _, ok := k.Take(func(int64) bool { return false }); !ok {
		t.Fatal("Take from a full pool failed")
	}
	// Nothing may start while the run is in progress (a creation starts at once when
	// allowed: the filler is woken by Take).
	time.Sleep(100 * time.Millisecond)
	if st := k.Stats(); st.Ready+st.Creating != 0 || f.next.Load() != 1 {
		t.Fatalf("refilled during the run: %+v, %d created", st, f.next.Load())
	}
	k.Done()
	waitStats(t, k, func(s port.PoolStats) bool { return s.Ready == 1 })
	if n := f.next.Load(); n != 2 {
		t.Errorf("%d created, want 2", n)
	}
}

func TestKeeperCountsFailures(t *testing.T) {
	f := &fakes{fail: ErrPreload}
	k := f.keeper(1, 1)
	k.Start()
	st := waitStats(t, k, func(s port.PoolStats) bool { return s.Failed >= 1 })
	if st.PreloadFailed < 1 || st.Ready != 0 {
		t.Errorf("stats %+v: want a preload failure and nothing ready", st)
	}
	if _, ok := k.Take(func(int64) bool { return false }); ok {
		t.Error("Take from an empty pool succeeded")
	}
	k.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOptions(t *testing.T) {
	if _, err := CheckOptions(port.PoolOptions{Size: 0}, 2); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("size 0: %v", err)
	}
	if _, err := CheckOptions(port.PoolOptions{Size: 1, RefillConcurrency: -1}, 2); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("negative concurrency: %v", err)
	}
	if o, err := CheckOptions(port.PoolOptions{Size: 1}, 2); err != nil || o.RefillConcurrency != 2 {
		t.Errorf("default: %+v, %v", o, err)
	}
}

func TestOpenAndCold(t *testing.T) {
	var o Open[int]
	if !o.Add(1) || !o.Add(2) {
		t.Fatal("Add before Close refused")
	}
	o.Remove(1)
	if got := o.Close(); len(got) != 1 || got[0] != 2 {
		t.Errorf("Close = %v, want [2]", got)
	}
	if o.Add(3) {
		t.Error("Add after Close accepted")
	}
	res, err := Cold(context.Background(), func(context.Context, port.RunSpec) (*port.RunResult, error) {
		return &port.RunResult{}, nil
	}, port.RunSpec{}, "why")
	if err != nil || res.Start != port.StartCold || res.StartNote != "why" {
		t.Errorf("Cold = %+v, %v", res, err)
	}
}

func TestClaimMessage(t *testing.T) {
	if _, _, err := ClaimMessage(port.RunSpec{Image: "img"}, nil, nil, "/"); err == nil {
		t.Error("no argv anywhere: want an error")
	}
	msg, nonce, err := ClaimMessage(port.RunSpec{Image: "img"}, []string{"/bin/agent"}, []string{"A=1"}, "/app")
	if err != nil || len(msg) == 0 || msg[len(msg)-1] != '\n' {
		t.Errorf("ClaimMessage = %q, %v", msg, err)
	}
	c, err := bridgeapi.ReadClaim(bytes.NewReader(msg))
	if err != nil || c.ExitNonce != nonce || len(nonce) != 2*bridgeapi.ExitNonceBytes {
		t.Errorf("the claim's exit nonce %q, returned %q (%v)", c.ExitNonce, nonce, err)
	}
	if _, again, _ := ClaimMessage(port.RunSpec{Image: "img"}, []string{"/bin/agent"}, nil, "/"); again == nonce {
		t.Error("two claims with the same exit nonce")
	}
	for _, kv := range c.Env {
		if strings.Contains(kv, nonce) {
			t.Errorf("the exit nonce is in the agent's environment: %s", kv)
		}
	}
}
