package inprocproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// ValidateSpec checks a proxy spec as Start does, without starting anything. Errors
// wrap port.ErrInvalidSpec. A front that hands the spec to a proxy elsewhere (a
// sidecar beside a sandbox on a cluster node) uses it to refuse bad input at its own
// boundary.
func ValidateSpec(spec port.ProxySpec) error {
	_, _, err := validate(spec)
	return err
}

// Serve runs one per-run proxy for spec on ln, a listener the caller made and owns the
// path of (a unix socket in a directory shared with the sandbox, say), with the same
// engine, policy, budget and audit as Start. No directory or marker is made: the
// caller places the socket, and Stop closes the listener (unlinking a unix socket)
// without removing anything else. The proxy's Socket is empty.
//
// It is the entry point of a proxy that runs beside a sandbox rather than in the host
// process (cmd/sandbox-llmproxy, the Nomad runner's sidecar). Errors are those of
// Start for a bad spec or option; ln is closed on error.
func (m *Manager) Serve(ctx context.Context, spec port.ProxySpec, ln net.Listener, opts ...ServeOption) (*Proxy, error) {
	policy, upstream, err := validate(spec)
	var sc serveConfig
	for _, o := range opts {
		if err == nil && o != nil {
			err = o(&sc)
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = ln.Close()
		return nil, opErr("Serve", spec.RunID, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "serve-" + spec.RunID + "-" + hex.EncodeToString(b[:])
	p := newProxy(m, spec, policy, upstream, name, "", "", time.Now().UTC(), trace.SpanContextFromContext(ctx), sc.attestKey)
	m.mu.Lock()
	m.active[name] = p
	m.mu.Unlock()
	p.serve(ln)
	return p, nil
}

// ServeOption configures Serve.
type ServeOption func(*serveConfig) error

type serveConfig struct{ attestKey string }

// WithAttestKey gives the proxy Serve starts the run's attestation key (made with
// bridgeapi.NewAttestKey), which whoever starts the run's sandbox hands to its
// bridge: the proxy takes only an attestation that carries it. Without it the proxy
// mints its own (Proxy.Socket carries it).
func WithAttestKey(key string) ServeOption {
	return func(c *serveConfig) error {
		if !bridgeapi.ValidAttestKey(key) {
			return port.Invalidf("inproc: the attestation key is not %d hex digits", 2*bridgeapi.AttestKeyBytes)
		}
		c.attestKey = key
		return nil
	}
}
