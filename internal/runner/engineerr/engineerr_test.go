package engineerr

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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

// TestClassifyAPI: an orchestrator API's errors get the same sentinels as an engine's,
// and a request that got no answer at all (a transport error) is unavailable.
func TestClassifyAPI(t *testing.T) {
	is := func(s string) func(error) bool {
		return func(err error) bool { return strings.Contains(err.Error(), s) }
	}
	classify := func(err error) error { return ClassifyAPI("nomad", err, is("404"), is("400"), is("503")) }
	for _, tc := range []struct {
		err  error
		want error
	}{
		{errors.New("404 no job"), port.ErrNotFound},
		{errors.New("400 bad job"), port.ErrInvalidSpec},
		{errors.New("503 try later"), port.ErrUnavailable},
		{&url.Error{Op: "Get", URL: "http://127.0.0.1:4646", Err: errors.New("connection refused")}, port.ErrUnavailable},
	} {
		if got := classify(tc.err); !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("%v: %v, want %v wrapping it", tc.err, got, tc.want)
		}
	}
	if got := classify(errors.New("503")); !strings.Contains(got.Error(), "unavailable: nomad: 503") {
		t.Errorf("the API is not named: %v", got)
	}
	for _, err := range []error{nil, context.Canceled, errors.New("other")} {
		if got := classify(err); got != err {
			t.Errorf("%v came back as %v", err, got)
		}
	}
}
