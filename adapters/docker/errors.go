package docker

import (
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
	"github.com/agentsandbox/sandbox/port"
)

// classify maps an SDK error to the port sentinels, keeping the original as the cause
// (engineerr.Classify, with the client's connection failures as unavailable).
func classify(err error) error {
	return engineerr.Classify("docker daemon (is it running, and is this the address? WithHost or DOCKER_HOST sets it; Runner.Ping checks it before any run)", err, client.IsErrConnectionFailed)
}

func opErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: "docker." + op, RunID: runID, Err: err}
}
