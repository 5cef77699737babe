package kubernetes

import (
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestPodLostIsRemovedOnlyWhenDeleted: a Pod deleted by someone else is
// port.ErrRemoved, as a removed sandbox is on the other runtimes; an evicted Pod or a
// lost node is not (nobody removed it).
func TestPodLostIsRemovedOnlyWhenDeleted(t *testing.T) {
	for reason, removed := range map[string]bool{"deleted": true, "evicted": false, "node lost": false} {
		err := error(&port.RunError{Code: port.CodeInternal, Err: &PodLostError{Pod: "p", Reason: reason}})
		if !errors.Is(err, ErrPodLost) || errors.Is(err, port.ErrRemoved) != removed {
			t.Errorf("%s: ErrPodLost %v, ErrRemoved %v; want true, %v", reason, errors.Is(err, ErrPodLost), errors.Is(err, port.ErrRemoved), removed)
		}
	}
}
