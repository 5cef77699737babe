// Package bgclean runs the removal of a finished run's resources off the caller's
// critical path, with a bound: at most N removals are pending at once, and a removal
// that finds the queue full runs inline, so a burst of runs slows down instead of
// piling up containers. Every removal has its own timeout (the caller's business) and
// the resources it removes stay labelled until removed, so a host that dies with
// removals pending leaves nothing a Sweep cannot find.
package bgclean

import (
	"context"
	"sync"
)

// Queue runs removals in the background. The zero value is not usable; use New.
type Queue struct {
	sem chan struct{}
	wg  sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

// New returns a Queue with at most n removals pending; n <= 0 runs every removal
// inline.
func New(n int) *Queue {
	if n < 0 {
		n = 0
	}
	return &Queue{sem: make(chan struct{}, n)}
}

// Go runs fn in the background when a slot is free and the queue is open, else inline
// before returning. fn must bound its own duration.
func (q *Queue) Go(fn func()) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		fn()
		return
	}
	select {
	case q.sem <- struct{}{}:
	default:
		q.mu.Unlock()
		fn()
		return
	}
	q.wg.Add(1)
	q.mu.Unlock()
	go func() {
		defer func() { <-q.sem; q.wg.Done() }()
		fn()
	}()
}

// Wait returns when every removal started so far has finished, or with ctx's error.
func (q *Queue) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close makes later removals run inline and waits for the pending ones (see Wait).
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return q.Wait(ctx)
}
