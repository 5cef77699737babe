// Package imagepull holds what both runners' image pulls share: the policy decision and
// the classification of a registry's refusals into the port's sentinels.
package imagepull

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentsandbox/sandbox/internal/runner/imageref"
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

// Request is one pull of a reference: parsed, with the name the engine stores it
// under (name@digest when the reference pins a digest).
type Request struct {
	Ref   string       // as the caller gave it
	Image imageref.Ref // parsed
	Local string       // the engine's name for it
}

// NewRequest checks policy and parses ref.
func NewRequest(ref string, policy port.PullPolicy) (Request, error) {
	if err := policy.Validate(); err != nil {
		return Request{}, err
	}
	ir, err := imageref.Parse(ref)
	if err != nil {
		return Request{}, err
	}
	q := Request{Ref: ref, Image: ir, Local: ir.Tagged()}
	if ir.Digest != "" {
		q.Local = ir.Pinned()
	}
	return q, nil
}

// Err is err as the pull's *port.PullError.
func (q Request) Err(err error) error {
	return &port.PullError{Ref: q.Ref, Registry: q.Image.Domain, Err: err}
}

// NotHeld is the error of an image the engine does not hold (in where) under a
// policy that does not pull.
func (q Request) NotHeld(where string) error {
	return q.Err(Missing(q.Local, where, port.PullNever, nil))
}

// Missing is the error of a run's image that the engine (where: "Docker", "containerd
// namespace agentsandbox") does not hold under policy, which did not pull it:
// nothing was created. It wraps port.ErrImageNotFound (and so port.ErrNotFound) and
// says the two ways out: load the image, or let the runner pull it.
func Missing(ref, where string, policy port.PullPolicy, cause error) error {
	if policy == "" {
		policy = port.PullNever
	}
	fix := "load it first (sandbox.Sandbox.LoadImage or the runner's LoadImage, `docker load`, `ctr images import`), or let the runner pull it from a registry (the runner's WithPullPolicy(port.PullIfNotPresent))"
	if policy != port.PullNever {
		fix = "load it first (sandbox.Sandbox.LoadImage or the runner's LoadImage), or check the reference: the registry did not have it"
	}
	err := fmt.Errorf("%w: image %q is not in %s and the pull policy is %s: %s", port.ErrImageNotFound, ref, where, policy, fix)
	if cause != nil {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}

// CheckTag is nil when the reference pins no digest besides a tag, or when the tag
// names the pinned digest (got, resolved at the registry): otherwise the caller's
// two statements about the image disagree, and neither silently wins.
func (q Request) CheckTag(got string) error {
	if q.Image.Digest == "" || q.Image.Tag == "" || got == q.Image.Digest.String() {
		return nil
	}
	return q.Err(Mismatch(q.Image.Tagged(), q.Image.Digest.String(), got))
}

// CheckPulled is nil when the reference pins no digest or the pulled content (got)
// is the pinned one.
func (q Request) CheckPulled(got string) error {
	if q.Image.Digest == "" || got == q.Image.Digest.String() {
		return nil
	}
	return q.Err(Mismatch(q.Local, q.Image.Digest.String(), got))
}

// Ensure applies a runner's pull policy to a run's image through pull (the runner's)
// and returns the name to use it by (name@digest for a pinned reference).
func Ensure(ctx context.Context, ref string, policy port.PullPolicy, pull func(context.Context, string, port.PullPolicy) (port.PulledImage, error)) (string, error) {
	if policy == "" || policy == port.PullNever {
		return ref, nil
	}
	p, err := pull(ctx, ref, policy)
	if err != nil {
		return "", err
	}
	return p.Ref, nil
}

// SetPolicy is a runner's WithPullPolicy: p, checked, into *dst.
func SetPolicy(dst *port.PullPolicy, p port.PullPolicy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	*dst = p
	return nil
}

// SetCredentials is a runner's WithRegistryCredentials: creds, not nil, into *dst.
func SetCredentials(dst *port.RegistryCredentials, creds port.RegistryCredentials) error {
	if creds == nil {
		return port.Invalidf("registry credentials are nil")
	}
	*dst = creds
	return nil
}
