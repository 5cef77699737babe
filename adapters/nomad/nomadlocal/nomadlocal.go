// Package nomadlocal starts a throwaway Nomad cluster on this machine, for trying the
// Nomad runner (examples/nomad's -local) and for tests: one server and two client
// agents bound to 127.0.0.1, each with its own data directory, ports and node name,
// with the docker driver enabled. Placement across two nodes is then real (the server
// uses the spread scheduler, so runs alternate between them). A cluster takes about 5
// to 10 seconds to become ready (both nodes ready with a healthy docker driver).
//
// Close tears everything down on every path: it stops every job, removes the
// containers the clients started (found by their node names), kills the agents,
// unmounts what the clients mounted and removes their directories. The agents are
// started with a parent-death signal, so they die with the process that started them.
//
// The nomad binary comes from NOMAD_BIN (scripts/install-nomad.sh prints it) or PATH.
// It is for development: a production cluster is run by its operators. Tests share
// one cluster per package through internal/testsupport/nomadtest.
package nomadlocal
