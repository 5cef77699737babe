package containerd

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/testsupport/registrytest"
	"github.com/agentsandbox/sandbox/port"
)

// TestPullFromRegistry pulls from a real registry with htpasswd authentication on
// loopback over plain HTTP. About 5 s.
func TestPullFromRegistry(t *testing.T) {
	base, _ := runnerEnv(t)
	registrytest.TestPuller(t, registrytest.PullHarness{
		New: func(t *testing.T, policy port.PullPolicy, creds port.RegistryCredentials) registrytest.PullRunner {
			opts := []Option{WithOwner("pulltest"), WithPullPolicy(policy)}
			if creds != nil {
				opts = append(opts, WithRegistryCredentials(creds))
			}
			r, _ := runnerEnv(t, opts...)
			return r
		},
		Remove: func(ctx context.Context, ref string) error {
			err := base.cli.ImageService().Delete(base.ns(ctx), ref)
			if errdefs.IsNotFound(err) {
				return nil
			}
			return err
		},
	})
}
