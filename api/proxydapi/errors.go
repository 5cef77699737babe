package proxydapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentsandbox/sandbox/errdefs"
)

// APIError is the body of every admin error answer.
type APIError struct {
	// Code is one of the Code* constants.
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of the admin API (APIError.Code).
const (
	CodeInvalidSpec = "invalid_spec"
	CodeNotFound    = "not_found"
	CodeUnsupported = "unsupported"
	CodeUnavailable = "unavailable"
	CodeForbidden   = "forbidden"
	CodeInternal    = "internal"
)

// errorTable is the one two-way mapping between the sentinels the daemon's
// errors wrap and the codes and statuses on the wire: the daemon reads it one
// way (ToAPIError), the client the other (FromAPIError). The first sentinel an
// error wraps wins; anything else is CodeInternal (500).
var errorTable = []struct {
	sentinel error
	code     string
	status   int
}{
	{errdefs.ErrInvalidSpec, CodeInvalidSpec, http.StatusBadRequest},
	{errdefs.ErrNotFound, CodeNotFound, http.StatusNotFound},
	{errdefs.ErrUnsupported, CodeUnsupported, http.StatusNotImplemented},
	{errdefs.ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
	{errdefs.ErrPermissionDenied, CodeForbidden, http.StatusForbidden},
}

// ToAPIError returns the status and body the daemon answers err with.
func ToAPIError(err error) (int, APIError) {
	for _, e := range errorTable {
		if errors.Is(err, e.sentinel) {
			return e.status, APIError{Code: e.code, Message: err.Error()}
		}
	}
	return http.StatusInternalServerError, APIError{Code: CodeInternal, Message: err.Error()}
}

// FromAPIError returns the error an admin answer with status and body (an
// APIError) stands for, wrapping the sentinel of its code (errdefs.ErrInternal for
// CodeInternal, an unknown code, or a body that is not an APIError).
func FromAPIError(status int, body []byte) error {
	var ae APIError
	if json.Unmarshal(body, &ae) != nil || ae.Code == "" {
		return fmt.Errorf("%w: proxyd: HTTP %d", errdefs.ErrInternal, status)
	}
	sentinel := errdefs.ErrInternal
	for _, e := range errorTable {
		if e.code == ae.Code {
			sentinel = e.sentinel
			break
		}
	}
	return fmt.Errorf("%w: proxyd: %s", sentinel, ae.Message)
}
