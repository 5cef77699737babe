package docker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// sweepDeadOwners removes what test processes that died mid-run (a killed go test)
// left behind: every owner whose tag names a process that is gone is swept whole, so
// this run's tests start clean instead of counting it as their own. Live owners, a
// concurrent run's among them, are left alone.
func sweepDeadOwners() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	owners := map[string]bool{}
	f := client.Filters{}.Add("label", port.LabelOwner)
	if cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cs.Items {
			owners[c.Labels[port.LabelOwner]] = true
		}
	}
	if vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}); err == nil {
		for _, v := range vs.Items {
			owners[v.Labels[port.LabelOwner]] = true
		}
	}
	for o := range owners {
		if !testenv.OwnerDead(o) {
			continue
		}
		if r, err := NewRunner(WithClient(cli), WithOwner(o)); err == nil {
			rep, err := r.Sweep(ctx, port.SweepOptions{})
			fmt.Fprintf(os.Stderr, "swept the dead test owner %s: %d removed, %v\n", o, len(rep.Removed), err)
		}
		if m, err := NewProxyManager(WithClient(cli), WithOwner(o)); err == nil {
			_, _ = m.Sweep(ctx, port.SweepOptions{})
		}
	}
}
