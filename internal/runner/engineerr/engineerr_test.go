package engineerr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/port"
)

var errConn = errors.New("cannot connect")

func TestClassify(t *testing.T) {
	isConn := func(err error) bool { return errors.Is(err, errConn) }
	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"unavailable":      {fmt.Errorf("dial: %w", cerrdefs.ErrUnavailable), port.ErrUnavailable},
		"connection":       {fmt.Errorf("ping: %w", errConn), port.ErrUnavailable},
		"not found":        {fmt.Errorf("image: %w", cerrdefs.ErrNotFound), port.ErrNotFound},
		"invalid argument": {fmt.Errorf("reference: %w", cerrdefs.ErrInvalidArgument), port.ErrInvalidSpec},
	} {
		got := Classify("engine-x", tc.err, isConn)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("%s: %v, want %v wrapping the cause", name, got, tc.want)
		}
		if tc.want == port.ErrUnavailable && !strings.Contains(got.Error(), "engine-x") {
			t.Errorf("%s: %v does not name the engine", name, got)
		}
	}
	for _, err := range []error{context.Canceled, fmt.Errorf("x: %w", context.DeadlineExceeded), errors.New("other")} {
		if got := Classify("e", err, nil); got != err {
			t.Errorf("Classify(%v) = %v, want it unchanged", err, got)
		}
	}
	if Classify("e", nil, nil) != nil {
		t.Error("nil is not nil")
	}
	// Without the engine's own predicate, a connection error is not unavailable.
	if got := Classify("e", errConn, nil); errors.Is(got, port.ErrUnavailable) {
		t.Errorf("Classify without predicate = %v", got)
	}
}
