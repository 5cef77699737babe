package inprocproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"

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
// Start for a bad spec; ln is closed on error.
func (m *Manager) Serve(ctx context.Context, spec port.ProxySpec, ln net.Listener) (*Proxy, error) {
	policy, upstream, err := validate(spec)
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
	p := newProxy(m, spec, policy, upstream, name, "", "", time.Now().UTC(), trace.SpanContextFromContext(ctx))
	m.mu.Lock()
	m.active[name] = p
	m.mu.Unlock()
	p.serve(ln)
	return p, nil
}
