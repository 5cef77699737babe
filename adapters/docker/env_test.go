package docker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

var env struct {
	once  sync.Once
	cli   *client.Client
	image string
	err   error
}

// dockerEnv returns a client to a reachable daemon with the probe agent image loaded,
// skipping (or, in CI, failing) the test when there is no daemon.
func dockerEnv(t testing.TB) (*client.Client, string) {
	t.Helper()
	env.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			env.err = err
			return
		}
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			env.err = err
			return
		}
		env.cli = cli
		ref, archive, err := sandboxtest.ProbeImage(ctx)
		if err != nil {
			env.err = err
			return
		}
		if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
			env.err = err
			return
		}
		env.image = ref
	})
	if env.cli == nil {
		testenv.Need(t, "docker", false, "no Docker daemon: "+errString(env.err))
	}
	if env.err != nil {
		t.Fatalf("preparing the test image: %v", env.err)
	}
	return env.cli, env.image
}

func errString(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}

// leftovers lists the containers and volumes still labelled with runID.
func leftovers(cli *client.Client) func(context.Context, string) ([]string, error) {
	return func(ctx context.Context, runID string) ([]string, error) {
		f := client.Filters{}.Add("label", port.LabelRunID+"="+runID)
		var out []string
		cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			return nil, err
		}
		for _, c := range cs.Items {
			out = append(out, "container:"+c.ID)
		}
		vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			return nil, err
		}
		for _, v := range vs.Items {
			out = append(out, "volume:"+v.Name)
		}
		return out, nil
	}
}

// drained is leftovers after r's background removals are done.
func drained(r *Runner, left func(context.Context, string) ([]string, error)) func(context.Context, string) ([]string, error) {
	return func(ctx context.Context, runID string) ([]string, error) {
		if err := r.Drain(ctx); err != nil {
			return nil, err
		}
		return left(ctx, runID)
	}
}
