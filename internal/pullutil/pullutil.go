// Package pullutil holds what both runners' image pulls share: the policy decision and
// the classification of a registry's refusals into the port's sentinels.
package pullutil

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/port"
)

// Classify maps an engine's pull error to the port sentinels, keeping the original as
// the cause. The engines pass a registry's refusal on as text as often as by status
// (the Docker daemon's progress stream, containerd's resolver), so both are read.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, port.ErrNotFound) || errors.Is(err, port.ErrPermissionDenied) ||
		errors.Is(err, port.ErrDigestMismatch) || errors.Is(err, port.ErrUnavailable) || errors.Is(err, port.ErrInvalidSpec) {
		return err
	}
	msg := strings.ToLower(err.Error())
	switch {
	case cerrdefs.IsUnauthorized(err), cerrdefs.IsPermissionDenied(err),
		strings.Contains(msg, "unauthorized"), strings.Contains(msg, "authentication required"),
		strings.Contains(msg, "no basic auth credentials"), strings.Contains(msg, "denied"),
		strings.Contains(msg, "401"):
		return fmt.Errorf("%w: %w", port.ErrPermissionDenied, err)
	case strings.Contains(msg, "digest") && (strings.Contains(msg, "mismatch") || strings.Contains(msg, "does not match") || strings.Contains(msg, "verification failed")):
		return fmt.Errorf("%w: %w", port.ErrDigestMismatch, err)
	case cerrdefs.IsNotFound(err), strings.Contains(msg, "manifest unknown"), strings.Contains(msg, "name unknown"),
		strings.Contains(msg, "not found"), strings.Contains(msg, "404"):
		return fmt.Errorf("%w: %w", port.ErrNotFound, err)
	case cerrdefs.IsUnavailable(err), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"),
		strings.Contains(msg, "i/o timeout"):
		return fmt.Errorf("%w: %w", port.ErrUnavailable, err)
	}
	return err
}

// Auth asks creds (which may be nil) for host's credentials.
func Auth(ctx context.Context, creds port.RegistryCredentials, host string) (port.RegistryAuth, bool, error) {
	if creds == nil {
		return port.RegistryAuth{}, false, nil
	}
	a, ok, err := creds.RegistryAuth(ctx, host)
	if err != nil {
		return port.RegistryAuth{}, false, fmt.Errorf("registry credentials for %s: %w", host, err)
	}
	return a, ok, nil
}

// Mismatch is the error of a tag that names other content than the pinned digest.
func Mismatch(tagged, pinned, got string) error {
	return fmt.Errorf("%w: %s names %s, the reference pins %s", port.ErrDigestMismatch, tagged, got, pinned)
}
