package bgclean

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

func TestBoundAndDrain(t *testing.T) {
	q := New(2)
	release := make(chan struct{})
	var started, done atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	for range 2 {
		q.Go(func() { started.Add(1); wg.Done(); <-release; done.Add(1) })
	}
	wg.Wait()
	// The queue is full: the third runs inline, before Go returns.
	inline := false
	q.Go(func() { inline = true })
	if !inline {
		t.Fatal("a removal past the bound did not run inline")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Wait(ctx); err == nil {
		t.Fatal("Wait returned nil with removals pending and ctx done")
	}
	close(release)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if done.Load() != 2 {
		t.Fatalf("Close returned with %d of 2 removals done", done.Load())
	}
	ran := false
	q.Go(func() { ran = true })
	if !ran {
		t.Fatal("a removal after Close did not run inline")
	}
}

func TestZeroRunsInline(t *testing.T) {
	q := New(0)
	ran := false
	q.Go(func() { ran = true })
	if !ran {
		t.Fatal("New(0) did not run inline")
	}
}
