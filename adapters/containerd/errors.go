package containerd

import (
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
)

// classify maps a containerd error to the port sentinels, keeping it as the cause
// (engineerr.Classify: the same table as the Docker runner's).
func classify(err error) error {
	return engineerr.Classify("containerd", err, nil)
}

// opErr is err in the adapter's *port.OpError (runner.OpErr).
func opErr(op, runID string, err error) error { return runner.OpErr("containerd."+op, runID, err) }
