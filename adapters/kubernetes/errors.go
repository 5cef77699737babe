package kubernetes

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/engineerr"
	"github.com/agentsandbox/sandbox/port"
)

// ErrPodLost matches a *PodLostError.
var ErrPodLost = errors.New("kubernetes: the run's pod was lost")

// PodLostError reports a run whose Pod ended for a reason outside the run: deleted by
// someone else, evicted by the kubelet, or its node lost. The RunResult returned with
// it holds the output collected until then. errors.Is(err, ErrPodLost) matches it,
// and so does port.ErrRemoved when it was deleted (as on the other runtimes); it
// comes wrapped in a *port.RunError with port.CodeInternal.
type PodLostError struct {
	Pod string
	// Reason is "deleted", "evicted", "node lost" or the Pod's own reason.
	Reason  string
	Message string
}

// Error implements error.
func (e *PodLostError) Error() string {
	s := fmt.Sprintf("kubernetes: pod %s %s", e.Pod, e.Reason)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is matches ErrPodLost, and port.ErrRemoved for a Pod deleted by someone else.
func (e *PodLostError) Is(target error) bool {
	return target == ErrPodLost || (target == port.ErrRemoved && e.Reason == "deleted")
}

// classify maps an API error to the port sentinels, keeping the original as the cause.
func classify(err error) error {
	return engineerr.ClassifyAPI("kubernetes", err, apierrors.IsNotFound,
		func(err error) bool { return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) },
		func(err error) bool {
			return apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsUnauthorized(err)
		})
}

// opErr is err in the adapter's *port.OpError (runner.OpErr).
func opErr(op, runID string, err error) error { return runner.OpErr("kubernetes."+op, runID, err) }
