package nomad

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
	"github.com/agentsandbox/sandbox/port"
)

// statusOf returns the HTTP status of an API error, or 0.
func statusOf(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		return ue.StatusCode()
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) && uep.HasStatusCode() {
		return uep.StatusCode()
	}
	// Some endpoints still report their status only in the message.
	if strings.Contains(err.Error(), "Unexpected response code: 404") {
		return 404
	}
	return 0
}

func isNotFound(err error) bool {
	return err != nil && (statusOf(err) == 404 || strings.Contains(err.Error(), "not found"))
}

// classify maps an API error to the port sentinels, keeping the original as the cause.
func classify(err error) error {
	return engineerr.ClassifyAPI("nomad", err, isNotFound, func(err error) bool { return statusOf(err) == 400 }, func(error) bool { return false })
}

// opErr is err in the adapter's *port.OpError (runner.OpErr).
func opErr(op, runID string, err error) error { return runner.OpErr("nomad."+op, runID, err) }

// ErrNodeLost reports a run whose client node the servers lost (its agent died or
// is partitioned away) while it ran: the run's output beyond what live writers got
// is on that node. The job is stopped but kept, so Nomad stops the sandbox when the
// node returns and a later Sweep purges it then. It wraps port.ErrUnavailable.
var ErrNodeLost = fmt.Errorf("%w: nomad: the sandbox's client node was lost", port.ErrUnavailable)

// StopAfterClientDisconnect is how long a client cut off from the servers lets a
// sandbox run before it stops it (the task group's stop_after_client_disconnect).
const StopAfterClientDisconnect = 30 * time.Second

// lostStatus reports an allocation whose node the servers lost.
func lostStatus(status string) bool {
	return status == api.AllocClientStatusLost || status == api.AllocClientStatusUnknown
}
