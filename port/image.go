package port

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/agentsandbox/sandbox/errdefs"
)

// PullPolicy says when a runner pulls a run's image from its registry, as Kubernetes'
// imagePullPolicy does.
type PullPolicy string

const (
	// PullNever uses only images already in the engine's store (LoadImage, `docker
	// load`, `ctr images import`); a missing image is port.ErrNotFound. The default:
	// a runner contacts no registry unless told to.
	PullNever PullPolicy = "Never"
	// PullIfNotPresent pulls an image the store does not hold (for a digest-pinned
	// reference: does not hold at that digest).
	PullIfNotPresent PullPolicy = "IfNotPresent"
	// PullAlways asks the registry before every run, so a moved tag is followed.
	PullAlways PullPolicy = "Always"
)

// Validate reports an unknown policy as ErrInvalidSpec; the empty policy is PullNever.
func (p PullPolicy) Validate() error {
	switch p {
	case "", PullNever, PullIfNotPresent, PullAlways:
		return nil
	}
	return Invalidf("pull policy %q is not %s, %s or %s", string(p), PullNever, PullIfNotPresent, PullAlways)
}

// ErrImageNotFound reports a run's image that the runtime does not hold and, under
// its pull policy, does not pull; nothing was created (the same value as
// errdefs.ErrImageNotFound). It also matches ErrNotFound. The error wrapping it
// names the image, LoadImage and the pull policy: load the image (Runtime.LoadImage,
// `docker load`, `ctr images import`) or let the runner pull it (PullIfNotPresent).
var ErrImageNotFound = errdefs.ErrImageNotFound

// ErrDigestMismatch reports an image whose content is not the digest its reference
// pinned (the same value as errdefs.ErrDigestMismatch).
var ErrDigestMismatch = errdefs.ErrDigestMismatch

// RegistryAuth is what a registry accepts from the engine: a user name and a password
// or token. It is handed to the engine's client on the host (the Docker daemon's pull
// request, containerd's resolver) and never to a sandbox; it formats and logs as
// redacted.
type RegistryAuth struct {
	Username string
	Password string
}

// String redacts the password.
func (a RegistryAuth) String() string { return fmt.Sprintf("{%s ****}", a.Username) }

// GoString redacts the password.
func (a RegistryAuth) GoString() string { return a.String() }

// LogValue redacts the password.
func (a RegistryAuth) LogValue() slog.Value { return slog.StringValue(a.String()) }

// RegistryCredentials gives a runner the credentials for a registry host (such as
// "registry.example.com" or "127.0.0.1:5000"), asked at every pull, so a host can
// rotate them or read them from its own secret store. ok false means anonymous.
type RegistryCredentials interface {
	RegistryAuth(ctx context.Context, host string) (auth RegistryAuth, ok bool, err error)
}

// StaticRegistryCredentials is a fixed map from registry host to credentials.
type StaticRegistryCredentials map[string]RegistryAuth

// RegistryAuth implements RegistryCredentials.
func (s StaticRegistryCredentials) RegistryAuth(_ context.Context, host string) (RegistryAuth, bool, error) {
	a, ok := s[host]
	return a, ok, nil
}

// PulledImage is what a pull found.
type PulledImage struct {
	// Ref is the reference as the engine stores it.
	Ref string
	// Digest is the manifest (or index) digest the registry served, "sha256:...".
	Digest string
	// Pulled is false when the policy found the image present and asked no registry.
	Pulled bool
}

// ImagePuller is the optional runner capability to pull images from a registry. A
// runner that has it applies its configured policy before each run and session; a
// host can also pull ahead of time.
//
// A reference may pin a digest: "host/name@sha256:…" is pulled by that digest (the
// engine verifies the content hashes to it), and "host/name:tag@sha256:…" also
// requires the tag to name that digest now. Errors: ErrInvalidSpec for a bad reference
// or policy; ErrNotFound for a repository, tag or digest the registry does not have
// (or an absent image with PullNever); ErrPermissionDenied for refused credentials;
// ErrDigestMismatch when the content is not the pinned digest; ErrUnavailable when the
// registry or engine cannot be reached. Each comes inside a *PullError.
type ImagePuller interface {
	PullImage(ctx context.Context, ref string, policy PullPolicy) (PulledImage, error)
}

// PullError says which reference, from which registry, failed to pull. It unwraps to
// the cause, which wraps one of the sentinels above.
type PullError struct {
	Ref      string
	Registry string
	Err      error
}

// Error implements error.
func (e *PullError) Error() string {
	return fmt.Sprintf("pull %s from %s: %v", e.Ref, e.Registry, e.Err)
}

// Unwrap returns the cause.
func (e *PullError) Unwrap() error { return e.Err }
