package sandboxtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestPoolRefillBetweenRuns proves a pool made with PoolOptions.RefillBetweenRuns
// creates no sandbox while a run it served is in progress, and is full again after
// it: a warm run of 3 s is watched through Stats for its first second (the run
// cannot have ended by then: the claim precedes the agent's sleep). image is the
// probe image (/agent); the pooler must pool a template without workspace. About 5 s.
func TestPoolRefillBetweenRuns(t *testing.T, pooler port.Pooler, image string) {
	spec := port.RunSpec{Image: image, Limits: port.Limits{Timeout: 90 * time.Second}}
	p, err := pooler.WarmPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1, RefillBetweenRuns: true})
	must(t, err)
	defer func() { must(t, p.Close(context.Background())) }()
	waitFull(t, p, 1)

	var seen atomic.Int64 // Ready+Creating seen during the run, plus one; 0: none
	var samples atomic.Int64
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var until time.Time
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			st := p.Stats()
			if st.Warm == 1 && until.IsZero() { // claimed: the slot is the run's now
				until = time.Now().Add(time.Second)
			}
			if !until.IsZero() && time.Now().Before(until) {
				samples.Add(1)
				if n := st.Ready + st.Creating; n > 0 {
					seen.Store(int64(n) + 1)
				}
			}
		}
	}()
	spec.RunID, spec.Argv = RunID("refill"), []string{"/agent", "sleep", "3"}
	res, err := p.RunOnce(context.Background(), spec)
	close(done)
	<-watched
	if err != nil || res.Start != port.StartWarm || res.ExitCode != 0 {
		t.Fatalf("the run: %v %+v", err, res)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("the pool was refilling during the run (%d ready or creating)", n-1)
	}
	if samples.Load() < 10 {
		t.Fatalf("only %d samples in the first second of the run", samples.Load())
	}
	waitFull(t, p, 1)
}
