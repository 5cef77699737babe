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

	mu      sync.Mutex
	closed  bool
	pending int
	idle    chan struct{} // closed while nothing is pending
}

// New returns a Queue with at most n removals pending; n <= 0 runs every removal
// inline.
func New(n int) *Queue {
	if n < 0 {
		n = 0
	}
	idle := make(chan struct{})
	close(idle)
	return &Queue{sem: make(chan struct{}, n), idle: idle}
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
	if q.pending == 0 {
		q.idle = make(chan struct{})
	}
	q.pending++
	q.mu.Unlock()
	go func() {
		defer func() {
			<-q.sem
			q.mu.Lock()
			if q.pending--; q.pending == 0 {
				close(q.idle)
			}
			q.mu.Unlock()
		}()
		fn()
	}()
}

// Wait returns when no removal is pending (every one started so far has finished), or
// with ctx's error.
func (q *Queue) Wait(ctx context.Context) error {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
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
