package docker

import (
	"context"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/registrytest"
	"github.com/agentsandbox/sandbox/port"
)

// TestPullFromRegistry pulls from a real registry with htpasswd authentication on
// loopback (Docker allows plain HTTP to 127.0.0.0/8). About 5 s.
func TestPullFromRegistry(t *testing.T) {
	cli, _ := dockerEnv(t)
	registrytest.TestPuller(t, registrytest.PullHarness{
		New: func(t *testing.T, policy port.PullPolicy, creds port.RegistryCredentials) registrytest.PullRunner {
			opts := []Option{WithClient(cli), WithOwner("pulltest"), WithPullPolicy(policy)}
			if creds != nil {
				opts = append(opts, WithRegistryCredentials(creds))
			}
			r, err := NewRunner(opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			return r
		},
		Remove: func(ctx context.Context, ref string) error {
			_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})
			if cerrdefs.IsNotFound(err) {
				return nil
			}
			return err
		},
	})
}
