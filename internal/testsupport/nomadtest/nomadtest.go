// Package nomadtest shares one real Nomad cluster (adapters/nomad/nomadlocal) among
// the tests of a package: Main starts it from TestMain and tears it down, also when
// the binary is interrupted; Shared hands it to a test, or skips the test (fails it
// under SANDBOX_REQUIRE) when the machine has no nomad binary.
//
// The cluster itself is nomadlocal's; the names below are its, for tests that start
// a cluster of their own (nomadtest.Start with Options{ACL: true}).
package nomadtest

import (
	"context"

	"github.com/agentsandbox/sandbox/adapters/nomad/nomadlocal"
)

// Version is the Nomad version the project pins (nomadlocal.Version).
const Version = nomadlocal.Version

// Options configure Start (nomadlocal.Options).
type Options = nomadlocal.Options

// Cluster is a running cluster (nomadlocal.Cluster).
type Cluster = nomadlocal.Cluster

// Binary returns the nomad binary (nomadlocal.Binary).
func Binary() (string, error) { return nomadlocal.Binary() }

// Start starts a cluster (nomadlocal.Start).
func Start(ctx context.Context, opts Options) (*Cluster, error) { return nomadlocal.Start(ctx, opts) }
