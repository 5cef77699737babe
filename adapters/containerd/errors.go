package containerd

import (
	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
	"github.com/agentsandbox/sandbox/port"
)

// classify maps a containerd error to the port sentinels, keeping it as the cause
// (engineerr.Classify: the same table as the Docker runner's).
func classify(err error) error {
	return engineerr.Classify("containerd", err, nil)
}

func opErr(op, runID string, err error) error {
	if err == nil {
		return nil
	}
	return &port.OpError{Op: "containerd." + op, RunID: runID, Err: err}
}
