package containerd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// sweepDeadOwners removes what test processes that died mid-run (a killed go test)
// left in the project's namespaces: every owner whose tag names a process that is
// gone is swept whole (containers, tasks, snapshots, leases, FIFOs), so this run's
// tests start clean instead of counting it as their own. Live owners, a concurrent
// run's among them, are left alone.
func sweepDeadOwners() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe, err := NewRunner()
	if err != nil {
		return
	}
	defer probe.Close()
	nss, err := probe.cli.NamespaceService().List(ctx)
	if err != nil {
		return
	}
	for _, ns := range nss {
		if !strings.HasPrefix(ns, "agentsandbox") {
			continue
		}
		owners := map[string]bool{}
		cs, err := probe.cli.Containers(namespaces.WithNamespace(ctx, ns), "labels."+fmt.Sprintf("%q", port.LabelOwner))
		if err != nil {
			continue
		}
		for _, c := range cs {
			if l, err := c.Labels(namespaces.WithNamespace(ctx, ns)); err == nil {
				owners[l[port.LabelOwner]] = true
			}
		}
		for o := range owners {
			if !testenv.OwnerDead(o) {
				continue
			}
			r, err := NewRunner(WithNamespace(ns), WithOwner(o))
			if err != nil {
				continue
			}
			rep, err := r.Sweep(ctx, port.SweepOptions{})
			fmt.Fprintf(os.Stderr, "swept the dead test owner %s/%s: %d removed, %v\n", ns, o, len(rep.Removed), err)
			r.Close()
		}
	}
}
