package warmpool

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner/bgclean"
)

// Settle is the end of a stopped pool's Close: its ready sandboxes removed (Drain)
// and then the removals its runs queued on cleanup waited for, until ctx ends.
func Settle[S any](ctx context.Context, k *Keeper[S], cleanup *bgclean.Queue) error {
	if err := k.Drain(ctx); err != nil {
		return err
	}
	return cleanup.Wait(ctx)
}

// Shutdown is what a runner's Close does before it lets go of its client: it closes
// pools (the ones Open.Close returned) and then waits for the removals still queued
// on cleanup, all within timeout. What does not finish is logged and stays labelled
// for Sweep.
func Shutdown[P interface{ Close(context.Context) error }](pools []P, cleanup *bgclean.Queue, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range pools {
		if err := p.Close(ctx); err != nil {
			log.Warn("closing a warm pool did not finish; a Sweep will remove what is left", logattr.Err, err)
		}
	}
	if err := cleanup.Close(ctx); err != nil {
		log.Warn("background removals still pending at Close; a Sweep will finish them", logattr.Err, err)
	}
}
