package containerd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// TestLimitPassedTakesTheDaemonsDeadline: containerd's "context deadline exceeded"
// (an unknown error: its side of the propagated deadline) can come a moment before the
// run's own limit ends; it is the limit's, not a failed container. Any other error
// before the limit is not, and nor is a deadline error with the limit far away.
func TestLimitPassedTakesTheDaemonsDeadline(t *testing.T) {
	daemons := fmt.Errorf("context deadline exceeded: %w", cerrdefs.ErrUnknown)

	limit, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if !limitPassed(limit, daemons) {
		t.Error("the daemon's deadline answer 200 ms before the limit: not the limit's")
	}

	soon, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if limitPassed(soon, errors.New("runc: exec format error")) {
		t.Error("another error before the limit counted as the limit's")
	}

	far, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	if limitPassed(far, daemons) {
		t.Error("a deadline answer with the limit an hour away counted as the limit's")
	}

	gone, cancel4 := context.WithCancel(context.Background())
	cancel4()
	if !limitPassed(gone, errors.New("anything")) {
		t.Error("an ended limit: not the limit's")
	}
}
