package containerd

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunLease(t *testing.T) {
	owner := sandboxtest.RunID("lease")
	r, image := runnerEnv(t, WithOwner(owner))
	other, _ := runnerEnv(t, WithOwner(owner))
	sandboxtest.TestRunLease(t, sandboxtest.LeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: leftovers(r),
		Remove: func(ctx context.Context, runID string) error {
			ctx = r.ns(ctx)
			cs, err := r.cli.Containers(ctx, fmt.Sprintf(`labels.%q==%q`, port.LabelRunID, runID))
			if err != nil {
				return err
			}
			for _, c := range cs {
				if err := deleteContainer(ctx, c, false); err != nil {
					return err
				}
			}
			return nil
		},
	})
}
