// Package nomadlocal starts a throwaway Nomad cluster on this machine, for trying the
// Nomad runner (examples/nomad's -local) and for tests: one server and two client
// agents bound to 127.0.0.1, each with its own data directory, ports and node name,
// with the docker driver enabled. Close tears everything down: it stops every job,
// removes the containers the clients started, kills the agents and removes their
// directories. The agents die with the process that started them.
//
// The nomad binary comes from NOMAD_BIN (scripts/install-nomad.sh prints it) or PATH.
// It is for development: a production cluster is run by its operators.
package nomadlocal

import (
	"context"

	"github.com/agentsandbox/sandbox/internal/testsupport/nomadtest"
)

// Version is the Nomad version the project pins and tests against.
const Version = nomadtest.Version

// Options configure Start: Bin (default Binary()), Dir (default a temporary directory
// Close removes), Clients (default 2) and Log (the agents' output; nil discards it).
type Options = nomadtest.Options

// Cluster is a running local cluster: Addr is the server's HTTP address, NodeNames
// the clients' node names, Started how long Start took; Close stops it.
type Cluster = nomadtest.Cluster

// Binary returns the nomad binary: NOMAD_BIN, else nomad on PATH.
func Binary() (string, error) { return nomadtest.Binary() }

// Start starts a server and the clients and waits (bounded by ctx) until every
// client node is ready with a healthy docker driver (about 5 to 10 seconds). On error
// nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) { return nomadtest.Start(ctx, opts) }
