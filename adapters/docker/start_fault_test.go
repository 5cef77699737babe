package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// slowStart is a daemon whose answer to a container start comes late: the start call
// waits until its caller gives up, then the daemon starts the container anyway.
type slowStart struct{ apiClient }

func (s slowStart) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	<-ctx.Done()
	_, _ = s.apiClient.ContainerStart(context.WithoutCancel(ctx), id, o)
	return client.ContainerStartResult{}, ctx.Err()
}

// TestStartCancelledOrPastLimit: a run cancelled, or past its limit, while the daemon
// has not answered its start ends as a timeout wrapping the cause (a loaded machine
// once made CancelKills report container_failed), and its container is removed.
func TestStartCancelledOrPastLimit(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("slowstart")))
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.api = slowStart{r.cfg.api}
	for _, tc := range []struct {
		name   string
		cancel bool
		want   error
	}{
		{"cancelled", true, context.Canceled},
		{"past its limit", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runID := sandboxtest.RunID("slow-start")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // before the fix, the start waited for this
			defer cancel()
			if tc.cancel {
				time.AfterFunc(500*time.Millisecond, cancel)
			}
			res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "60"},
				Limits: port.Limits{Timeout: 2 * time.Second}})
			if !errors.Is(err, port.ErrTimeout) || res == nil || res.ErrorCode != port.CodeTimeout {
				t.Fatalf("RunOnce = %+v, %v; want a timeout", res, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v; want it to wrap %v", err, tc.want)
			}
			var left []string // removed in the background
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if left, err = leftovers(cli)(context.Background(), runID); err == nil && len(left) == 0 {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("left behind: %v %v", left, err)
				}
			}
		})
	}
}

// removedFirst is a daemon on which someone else force-removes the container just
// before the runner's attach or start of it reaches the daemon.
type removedFirst struct {
	apiClient
	before string // "attach" or "start"
}

func (s removedFirst) remove(ctx context.Context, id string) {
	_, _ = s.apiClient.ContainerRemove(context.WithoutCancel(ctx), id, client.ContainerRemoveOptions{Force: true})
}

func (s removedFirst) ContainerAttach(ctx context.Context, id string, o client.ContainerAttachOptions) (client.ContainerAttachResult, error) {
	if s.before == "attach" {
		s.remove(ctx, id)
	}
	return s.apiClient.ContainerAttach(ctx, id, o)
}

func (s removedFirst) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	if s.before == "start" {
		s.remove(ctx, id)
	}
	return s.apiClient.ContainerStart(ctx, id, o)
}

// TestRemovedBeforeItRan: a run whose container someone removes before it runs (before
// its attach, or its start) ends with port.ErrRemoved as a removal while it runs does,
// not as a failed container (on containerd a loaded machine once made TestRunLease's
// removal come that early). Nothing of the run is left.
func TestRemovedBeforeItRan(t *testing.T) {
	cli, image := dockerEnv(t)
	for _, before := range []string{"attach", "start"} {
		t.Run(before, func(t *testing.T) {
			r, err := NewRunner(WithClient(cli), WithOwner(testenv.Owner("early-rm")))
			if err != nil {
				t.Fatal(err)
			}
			r.cfg.api = removedFirst{r.cfg.api, before}
			runID := sandboxtest.RunID("early-rm")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: image, Argv: []string{"/agent", "sleep", "30"}, Limits: port.Limits{Timeout: time.Minute}})
			if !errors.Is(err, port.ErrRemoved) {
				t.Errorf("a run removed before its %s = %+v, %v; want port.ErrRemoved", before, res, err)
			}
			var left []string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if left, err = leftovers(cli)(context.Background(), runID); err == nil && len(left) == 0 {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("left behind: %v %v", left, err)
				}
			}
		})
	}
}
