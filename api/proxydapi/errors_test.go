package proxydapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestErrorTableBothWays: every sentinel the daemon can answer with comes back to
// the client as the same sentinel, with its message and the table's status.
func TestErrorTableBothWays(t *testing.T) {
	for _, tc := range []struct {
		sentinel error
		code     string
		status   int
	}{
		{port.ErrInvalidSpec, CodeInvalidSpec, http.StatusBadRequest},
		{port.ErrNotFound, CodeNotFound, http.StatusNotFound},
		{port.ErrUnsupported, CodeUnsupported, http.StatusNotImplemented},
		{port.ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
		{port.ErrPermissionDenied, CodeForbidden, http.StatusForbidden},
		{port.ErrInternal, CodeInternal, http.StatusInternalServerError},
	} {
		t.Run(tc.code, func(t *testing.T) {
			sent := fmt.Errorf("run %q: %w", "r1", tc.sentinel)
			status, ae := ToAPIError(sent)
			if status != tc.status || ae.Code != tc.code || ae.Message != sent.Error() {
				t.Fatalf("ToAPIError(%v) = %d %+v, want %d %s", sent, status, ae, tc.status, tc.code)
			}
			body, err := json.Marshal(ae)
			if err != nil {
				t.Fatal(err)
			}
			got := FromAPIError(status, body)
			if !errors.Is(got, tc.sentinel) {
				t.Fatalf("FromAPIError: %v does not wrap %v", got, tc.sentinel)
			}
			if !strings.Contains(got.Error(), sent.Error()) {
				t.Fatalf("FromAPIError: %q lost the message %q", got, sent)
			}
			// Each code names one sentinel: no other in the table matches.
			for _, other := range errorTable {
				if other.sentinel != tc.sentinel && errors.Is(got, other.sentinel) {
					t.Fatalf("FromAPIError(%s) also wraps %v", tc.code, other.sentinel)
				}
			}
		})
	}
}

// TestErrorTableOtherErrors: an error without a sentinel is internal, and an
// answer that is not an APIError (or has an unknown code) is internal too.
func TestErrorTableOtherErrors(t *testing.T) {
	status, ae := ToAPIError(errors.New("disk full"))
	if status != http.StatusInternalServerError || ae.Code != CodeInternal || ae.Message != "disk full" {
		t.Fatalf("ToAPIError = %d %+v", status, ae)
	}
	for name, body := range map[string]string{
		"not json":     "<html>bad gateway</html>",
		"no code":      `{"message":"x"}`,
		"unknown code": `{"code":"teapot","message":"short and stout"}`,
	} {
		err := FromAPIError(http.StatusBadGateway, []byte(body))
		if !errors.Is(err, port.ErrInternal) {
			t.Errorf("%s: %v, want ErrInternal", name, err)
		}
		for _, e := range errorTable {
			if errors.Is(err, e.sentinel) {
				t.Errorf("%s: %v wraps %v", name, err, e.sentinel)
			}
		}
	}
	if err := FromAPIError(http.StatusBadGateway, []byte("x")); !strings.Contains(err.Error(), "HTTP 502") {
		t.Errorf("a body that is no APIError keeps the status: %v", err)
	}
}
