package gateway

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/optcheck"
)

// Defaults.
const (
	// DefaultClientID and DefaultClientMode are the gateway enums for a server-side
	// integration.
	DefaultClientID   = "gateway-client"
	DefaultClientMode = "backend"
	// DefaultRole is the connection role: operators may start agent runs.
	DefaultRole = "operator"
	// DefaultReadLimit bounds inbound frames until the gateway states its maxPayload.
	DefaultReadLimit = 25 << 20
	// defaultTickInterval is assumed when the gateway states no tick interval.
	defaultTickInterval = 30 * time.Second
	defaultWriteTimeout = 10 * time.Second
)

// DefaultScopes are the operator scopes requested at connect, the same default
// OpenClaw's own backend client uses.
var DefaultScopes = []string{"operator.admin"}

// config is what the options build.
type config struct {
	token        string
	client       ClientInfo
	role         string
	scopes       []string
	logger       *slog.Logger
	readLimit    int64
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig    *tls.Config
	attempts     int
	backoff      time.Duration
	liveness     time.Duration
	writeTimeout time.Duration

	afterWrite func(*Client) // test hook: runs after each data frame is written
}

func defaultConfig() config {
	return config{
		client: ClientInfo{
			ID:       DefaultClientID,
			Version:  "agentsandbox-gateway/1",
			Platform: runtime.GOOS,
			Mode:     DefaultClientMode,
		},
		role:         DefaultRole,
		scopes:       DefaultScopes,
		logger:       slog.New(slog.DiscardHandler),
		attempts:     3,
		backoff:      250 * time.Millisecond,
		writeTimeout: defaultWriteTimeout,
	}
}

// Option configures Dial. Options validate their input and return an error
// wrapping errdefs.ErrInvalidSpec when it is unusable.
type Option func(*config) error

// WithToken sets the shared gateway token sent as auth.token.
func WithToken(token string) Option {
	return func(c *config) error {
		if strings.TrimSpace(token) != token || token == "" {
			return errdefs.Invalidf("gateway token must be non-empty without surrounding whitespace")
		}
		c.token = token
		return nil
	}
}

// WithClientInfo overrides the client identity. id and mode are gateway enums
// (see DefaultClientID, DefaultClientMode); version and platform are free text.
// Empty arguments keep the defaults.
func WithClientInfo(id, version, platform, mode string) Option {
	return func(c *config) error {
		for _, f := range []struct{ name, v string }{{"id", id}, {"version", version}, {"platform", platform}, {"mode", mode}} {
			if strings.TrimSpace(f.v) != f.v {
				return errdefs.Invalidf("client %s %q has surrounding whitespace", f.name, f.v)
			}
		}
		if id != "" {
			c.client.ID = id
		}
		if version != "" {
			c.client.Version = version
		}
		if platform != "" {
			c.client.Platform = platform
		}
		if mode != "" {
			c.client.Mode = mode
		}
		return nil
	}
}

// WithRole sets the connection role (default "operator").
func WithRole(role string) Option {
	return func(c *config) error {
		if role == "" || strings.TrimSpace(role) != role {
			return errdefs.Invalidf("role %q", role)
		}
		c.role = role
		return nil
	}
}

// WithScopes sets the operator scopes requested at connect (default DefaultScopes).
func WithScopes(scopes ...string) Option {
	return func(c *config) error {
		for _, s := range scopes {
			if s == "" || strings.TrimSpace(s) != s {
				return errdefs.Invalidf("scope %q", s)
			}
		}
		c.scopes = append([]string(nil), scopes...)
		return nil
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Set(&c.logger, l, l != nil, "nil logger") }
}

// WithReadLimit caps inbound frames at n bytes. Without it the client uses the
// gateway's advertised maxPayload (DefaultReadLimit until the gateway states it).
func WithReadLimit(n int64) Option {
	return func(c *config) error {
		return optcheck.Set(&c.readLimit, n, n > 0, "read limit %d must be positive", n)
	}
}

// WithDialContext makes Dial open its connections with dial instead of a TCP
// dial to the URL's host, for example to reach a gateway through a unix socket
// or another network namespace. The URL's host still names the gateway (Host
// header, TLS server name), and proxy environment variables are not consulted:
// dial decides where the bytes go.
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(c *config) error { return optcheck.Set(&c.dial, dial, dial != nil, "nil dial function") }
}

// WithTLSConfig sets the TLS configuration for wss:// URLs (default: the
// system roots, the URL's host as server name). The config is cloned.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return errdefs.Invalidf("nil TLS config")
		}
		c.tlsConfig = cfg.Clone()
		return nil
	}
}

// WithRetry makes Dial try up to attempts connections while the gateway is
// starting: on a refused or failed dial it waits backoff, on a retryable gateway
// error (UNAVAILABLE "gateway starting") it waits the gateway's retryAfterMs, or
// backoff when none is given. Every wait ends early when Dial's context does.
// The default is 3 attempts with a 250ms backoff.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(c *config) error {
		if attempts < 1 || backoff < 0 {
			return errdefs.Invalidf("retry attempts %d / backoff %s", attempts, backoff)
		}
		c.attempts, c.backoff = attempts, backoff
		return nil
	}
}

// WithLivenessTimeout sets how long the connection may stay silent (no frame, no
// tick, no pong) before it is declared dead. The default is 2.5 times the
// gateway's tick interval.
func WithLivenessTimeout(d time.Duration) Option {
	return func(c *config) error {
		return optcheck.Set(&c.liveness, d, d > 0, "liveness timeout %s must be positive", d)
	}
}

// WithWriteTimeout bounds each frame write (default 10s).
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		return optcheck.Set(&c.writeTimeout, d, d > 0, "write timeout %s must be positive", d)
	}
}

// wsDialer returns the WebSocket dialer for cfg: gorilla's default (proxy from
// the environment, 45s handshake timeout) with the dial function and TLS config
// of the options.
func (c *config) wsDialer() *websocket.Dialer {
	d := *websocket.DefaultDialer
	if c.dial != nil {
		d.NetDialContext = c.dial
		d.Proxy = nil
	}
	if c.tlsConfig != nil {
		d.TLSClientConfig = c.tlsConfig
	}
	return &d
}
