package docker

import (
	"context"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestRunLease(t *testing.T) {
	cli, image := dockerEnv(t)
	owner := testenv.Owner("lease")
	r, err := NewRunner(WithClient(cli), WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewRunner(WithClient(cli), WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunLease(t, sandboxtest.LeaseHarness{
		Runner: r, Other: other, Image: image, Leftovers: drained(r, leftovers(cli)),
		Remove: func(ctx context.Context, runID string) error {
			cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", port.LabelRunID+"="+runID)})
			if err != nil {
				return err
			}
			for _, c := range cs.Items {
				if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
					return err
				}
			}
			return nil
		},
	})
}
