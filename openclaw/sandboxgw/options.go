package sandboxgw

import (
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/port"
)

// Options configure a sandboxed gateway. Runner, Router, Image, Command, Dir and
// Models are required.
type Options struct {
	// Runner starts the sandbox.
	Runner port.SessionRunner
	// Router is the billing router (billing.Router) the gateway's LLM calls go to.
	Router *billing.Router
	// Image is a runtime image with Node (OpenClaw needs Node >= 24).
	Image string
	// Command runs OpenClaw's CLI inside, e.g. node and openclaw.mjs under a mount.
	Command []string
	// Mounts are read-only mounts (OpenClaw's package tree; Node if not in the image).
	Mounts []port.Mount
	// Dir is the gateway's host directory (the router's socket, the gateway's state).
	// A host that re-attaches after a restart passes the same Dir.
	Dir string
	// Models are the gateway's models (as given to openclaw.WithModels); the first is
	// the default unless Config sets one.
	Models []openclaw.Model
	// Config are further config options (agent timeout, denied tools...). Gateway
	// mode, the workspace and the base URL are set here.
	Config []openclaw.Option
	// Port is the gateway's port inside the sandbox (default DefaultPort).
	Port int
	// RunID names the sandbox (each incarnation adds a suffix); generated when empty.
	RunID string
	// Token is the gateway's auth token; generated when empty. A host that re-attaches
	// passes the token it kept (Gateway.Token).
	Token string
	// Limits bound the sandbox (memory default DefaultMemoryBytes, PIDs DefaultPIDs,
	// lifetime port.DefaultSessionLifetime).
	Limits port.Limits
	// ReadyTimeout bounds the start-up (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Liveness is the client's liveness window (default: the client's, 2.5 gateway
	// ticks): a silent connection is declared dead after it. A crashed gateway is seen
	// sooner: its sandbox exits and the exposed socket closes.
	Liveness time.Duration
	// AutoRestart starts a new sandbox when the gateway goes down, waiting MinBackoff,
	// then doubling up to MaxBackoff between failed attempts.
	AutoRestart            bool
	MinBackoff, MaxBackoff time.Duration
	// Egress, if set, lets the gateway's tools reach what the policy allows through
	// the egress proxy, with the policy's Credentials resolved on the host; nil means
	// no web access at all. The gateway keeps one egress proxy (one CA, one audit)
	// across restarts; a host that re-attaches serves a new one with a new CA, which
	// the running gateway does not trust for HTTPS (it reads its CA bundle at start).
	Egress *port.EgressPolicy
	// EgressResolver looks host names up for the egress proxy (default
	// net.DefaultResolver); every address is still checked on each dial.
	EgressResolver Resolver
	// EgressUpstreamRoots are PEM certificates the egress proxy verifies upstream TLS
	// against instead of the system roots (private CAs, tests).
	EgressUpstreamRoots []byte
	// EgressUnsafeAllow exempts address ranges from the egress proxy's SSRF guard.
	// For tests whose upstreams listen on loopback only; never in production.
	EgressUnsafeAllow []netip.Prefix
	// Logger receives diagnostics; default discard.
	Logger *slog.Logger
}

// Resolver looks host names up for the egress proxy; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (o *Options) check() error {
	switch {
	case o.Runner == nil || o.Router == nil:
		return port.Invalidf("sandboxgw: Runner and Router are required")
	case o.Image == "" || len(o.Command) == 0:
		return port.Invalidf("sandboxgw: Image and Command are required")
	case !filepath.IsAbs(o.Dir):
		return port.Invalidf("sandboxgw: Dir %q must be an absolute path", o.Dir)
	case len(o.Models) == 0:
		return port.Invalidf("sandboxgw: at least one model is required")
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Port < 1 || o.Port > 65535 || o.Port == 8080 {
		return port.Invalidf("sandboxgw: port %d out of range or taken by the bridge", o.Port)
	}
	if o.RunID == "" {
		o.RunID = "ocgw-" + randHex(6)
	}
	if err := port.ValidateRunID(o.RunID + "-999"); err != nil {
		return err
	}
	if o.Token == "" {
		o.Token = randHex(24)
	}
	if len(o.Token) < 16 || strings.ContainsAny(o.Token, " \t\r\n\x00") {
		return port.Invalidf("sandboxgw: token must be at least 16 bytes without whitespace")
	}
	for i, m := range o.Mounts {
		if m.Writable {
			return port.Invalidf("sandboxgw: mount %d is writable; OpenClaw and Node are mounted read-only", i)
		}
	}
	if o.Limits.MemoryBytes == 0 {
		o.Limits.MemoryBytes = DefaultMemoryBytes
	}
	if o.Limits.PIDs == 0 {
		o.Limits.PIDs = DefaultPIDs
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Liveness < 0 {
		return port.Invalidf("sandboxgw: negative liveness window")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Egress == nil && (o.EgressResolver != nil || len(o.EgressUpstreamRoots) > 0 || len(o.EgressUnsafeAllow) > 0) {
		return port.Invalidf("sandboxgw: egress options without an Egress policy")
	}
	if err := o.Egress.Validate(); err != nil {
		return err
	}
	for _, p := range o.EgressUnsafeAllow {
		if !p.IsValid() {
			return port.Invalidf("sandboxgw: invalid EgressUnsafeAllow prefix")
		}
	}
	return nil
}
