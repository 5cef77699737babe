package docker

import (
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
)

// classify maps an SDK error to the port sentinels, keeping the original as the cause
// (engineerr.Classify, with the client's connection failures as unavailable).
func classify(err error) error {
	return engineerr.Classify("docker daemon (is it running, and is this the address? WithHost or DOCKER_HOST sets it; Runner.Ping checks it before any run)", err, client.IsErrConnectionFailed)
}

// opErr is err in the adapter's *port.OpError (runner.OpErr).
func opErr(op, runID string, err error) error { return runner.OpErr("docker."+op, runID, err) }
