package nomadtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// AddrEnv carries the shared cluster's address to child processes of a test binary
// (sandboxtest's crash tests re-run the binary as a host that dies).
const AddrEnv = "SANDBOX_NOMADTEST_ADDR"

var shared = testenv.SharedPart[*Cluster]{Part: "nomad", Name: "nomadtest"}

// Main starts one cluster for a test package, runs the tests and tears the cluster
// down, also when the binary is interrupted (SIGINT, SIGTERM). Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(nomadtest.Main(m)) }
//
// Without a nomad binary the tests still run: Shared then skips them, or fails them
// when SANDBOX_REQUIRE names "nomad".
func Main(m *testing.M) int {
	bin, err := Binary()
	if err != nil {
		shared.Fail(err)
		return m.Run()
	}
	return shared.Main(m, func() (*Cluster, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := Start(ctx, Options{Bin: bin})
		if err != nil && ctx.Err() == nil {
			// A free port picked for an agent can be taken by another process before the
			// agent binds it: one more try, with new ports.
			fmt.Fprintf(os.Stderr, "nomadtest: retrying after: %v\n", err)
			c, err = Start(ctx, Options{Bin: bin})
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "nomadtest: a server and %d clients ready in %v\n", len(c.NodeNames), c.Started.Round(10*time.Millisecond))
		_ = os.Setenv(AddrEnv, c.Addr)
		return c, nil
	}, nil)
}

// Shared returns the cluster Main started. It skips t when there is none (or fails it
// when SANDBOX_REQUIRE names "nomad"), saying why.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	return shared.Get(t)
}
