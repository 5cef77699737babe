// Package testsweep removes, at the start of a test package, what test processes that
// died mid-run left in Docker and in the project's containerd namespaces. Owners made
// with testenv.Owner carry their process's tag; an owner whose process is gone is
// swept whole through the adapters' own Sweep, and every other owner (a live
// concurrent run's, a user's) is left alone.
//
// The adapters' own test packages do the same in-package (they cannot import this
// package without an import cycle).
package testsweep

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// Main sweeps dead test owners, then runs the package's tests.
func Main(m *testing.M) int {
	DeadOwners()
	return m.Run()
}

// DeadOwners sweeps every dead test owner on both runtimes (best effort: an
// unreachable daemon is the tests' to report).
func DeadOwners() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dockerOwners(ctx)
	containerdOwners(ctx)
}

func dockerOwners(ctx context.Context) {
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
		if r, err := docker.NewRunner(docker.WithClient(cli), docker.WithOwner(o)); err == nil {
			rep, err := r.Sweep(ctx, port.SweepOptions{})
			fmt.Fprintf(os.Stderr, "swept the dead test owner %s: %d removed, %v\n", o, len(rep.Removed), err)
		}
		if m, err := docker.NewProxyManager(docker.WithClient(cli), docker.WithOwner(o)); err == nil {
			_, _ = m.Sweep(ctx, port.SweepOptions{})
		}
	}
}

func containerdOwners(ctx context.Context) {
	cli, err := ctrd.New(containerd.DefaultAddress)
	if err != nil {
		return
	}
	defer cli.Close()
	nss, err := cli.NamespaceService().List(ctx)
	if err != nil {
		return
	}
	for _, ns := range nss {
		if !strings.HasPrefix(ns, "agentsandbox") {
			continue
		}
		nctx := namespaces.WithNamespace(ctx, ns)
		cs, err := cli.Containers(nctx, fmt.Sprintf("labels.%q", port.LabelOwner))
		if err != nil {
			continue
		}
		owners := map[string]bool{}
		for _, c := range cs {
			if l, err := c.Labels(nctx); err == nil {
				owners[l[port.LabelOwner]] = true
			}
		}
		for o := range owners {
			if !testenv.OwnerDead(o) {
				continue
			}
			r, err := containerd.NewRunner(containerd.WithNamespace(ns), containerd.WithOwner(o))
			if err != nil {
				continue
			}
			rep, err := r.Sweep(ctx, port.SweepOptions{})
			fmt.Fprintf(os.Stderr, "swept the dead test owner %s/%s: %d removed, %v\n", ns, o, len(rep.Removed), err)
			r.Close()
		}
	}
}
