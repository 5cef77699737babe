package runner

import (
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestSetOwner: a refused owner leaves the destination as it was.
func TestSetOwner(t *testing.T) {
	owner := "keep"
	if err := SetOwner(&owner, "bad owner"); !errors.Is(err, port.ErrInvalidSpec) || owner != "keep" {
		t.Errorf("bad owner: %v, owner %q", err, owner)
	}
	if err := SetOwner(&owner, "o-1"); err != nil || owner != "o-1" {
		t.Errorf("good owner: %v, owner %q", err, owner)
	}
}
