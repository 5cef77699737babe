package gateway

import (
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentsandbox/sandbox/port"
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
	dialer       *websocket.Dialer
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
		dialer:       websocket.DefaultDialer,
		attempts:     3,
		backoff:      250 * time.Millisecond,
		writeTimeout: defaultWriteTimeout,
	}
}

// Option configures Dial. Options validate their input and return an error
// wrapping port.ErrInvalidSpec when it is unusable.
type Option func(*config) error

// WithToken sets the shared gateway token sent as auth.token.
func WithToken(token string) Option {
	return func(c *config) error {
		if strings.TrimSpace(token) != token || token == "" {
			return port.Invalidf("gateway token must be non-empty without surrounding whitespace")
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
				return port.Invalidf("client %s %q has surrounding whitespace", f.name, f.v)
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
			return port.Invalidf("role %q", role)
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
				return port.Invalidf("scope %q", s)
			}
		}
		c.scopes = append([]string(nil), scopes...)
		return nil
	}
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return port.Invalidf("nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithReadLimit caps inbound frames at n bytes. Without it the client uses the
// gateway's advertised maxPayload (DefaultReadLimit until the gateway states it).
func WithReadLimit(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return port.Invalidf("read limit %d must be positive", n)
		}
		c.readLimit = n
		return nil
	}
}

// WithDialer sets the WebSocket dialer (default websocket.DefaultDialer).
func WithDialer(d *websocket.Dialer) Option {
	return func(c *config) error {
		if d == nil {
			return port.Invalidf("nil dialer")
		}
		c.dialer = d
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
			return port.Invalidf("retry attempts %d / backoff %s", attempts, backoff)
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
		if d <= 0 {
			return port.Invalidf("liveness timeout %s must be positive", d)
		}
		c.liveness = d
		return nil
	}
}

// WithWriteTimeout bounds each frame write (default 10s).
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return port.Invalidf("write timeout %s must be positive", d)
		}
		c.writeTimeout = d
		return nil
	}
}
