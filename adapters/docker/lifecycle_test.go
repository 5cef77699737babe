package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// stallingStart is the engine with a start that answers only once its context ends:
// a daemon too busy to start the container before the caller gives up.
type stallingStart struct {
	apiClient
	entered chan struct{}
}

func (s stallingStart) ContainerStart(ctx context.Context, id string, _ client.ContainerStartOptions) (client.ContainerStartResult, error) {
	close(s.entered)
	<-ctx.Done()
	return client.ContainerStartResult{}, ctx.Err()
}

// TestCancelDuringStartIsTheRunsEnd: a caller that gives up while the daemon starts
// the container ends the run as a timeout wrapping its cause (what CancelKills in the
// conformance suite asks, which a loaded machine reached at this point), not as the
// container's failure; and the container goes.
func TestCancelDuringStartIsTheRunsEnd(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli))
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	r.cfg.api = stallingStart{apiClient: r.cfg.api, entered: entered}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	runID := sandboxtest.RunID("cancel-start")
	res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "60"}, Limits: port.Limits{Timeout: time.Minute}})
	if !errors.Is(err, port.ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrTimeout wrapping context.Canceled", err)
	}
	if res == nil || res.ErrorCode != port.CodeTimeout {
		t.Errorf("res = %+v", res)
	}
	left, err := drained(r, leftovers(cli))(context.Background(), runID)
	if err != nil || len(left) != 0 {
		t.Errorf("leftovers %v, %v", left, err)
	}
}
