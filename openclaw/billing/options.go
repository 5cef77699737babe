package billing

import (
	"log/slog"
	"net/http"

	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/port"
)

// DefaultMaxRequestBytes bounds a request body. OpenClaw's requests carry the whole
// conversation and tool schemas (about 50 KB for a fresh session), so the bound is
// generous.
const DefaultMaxRequestBytes = 32 << 20

// Option configures a Router. Options validate their arguments; NewRouter returns
// the first error, wrapping port.ErrInvalidSpec.
type Option func(*config) error

type config struct {
	logger          *slog.Logger
	transport       http.RoundTripper
	maxRequestBytes int64
	fallback        *Run
}

func defaultConfig() config {
	return config{
		logger:          slog.New(slog.DiscardHandler),
		transport:       nil, // llmproxy.NewTransport, owned by the Router
		maxRequestBytes: DefaultMaxRequestBytes,
	}
}

// WithLogger sets the logger (default: discard). Tokens and keys are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.NotNil(&c.logger, l, "nil logger") }
}

// WithTransport sets the transport to the upstream. The default ignores proxy
// environment variables (the key must not travel through a proxy nobody configured),
// dials with a 10 s timeout and never times out a slow response.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *config) error { return optcheck.NotNil(&c.transport, rt, "nil transport") }
}

// WithMaxRequestBytes bounds a request body (default DefaultMaxRequestBytes).
func WithMaxRequestBytes(n int64) Option {
	return func(c *config) error { return optcheck.Positive(&c.maxRequestBytes, n, "max request bytes") }
}

// WithFallback bills calls that carry no live run token to an explicit fallback
// run instead of refusing them. It weakens fail-closed on purpose, for deployments
// that prefer a flagged bill to a failed call: such calls are counted in
// Stats.Fallback, logged at warning level and recorded in the fallback
// registration's audit (Router.Fallback), and LiteLLM sees them under the
// fallback's run_id, so they are never billed to nobody. The fallback run's
// attribution is validated like any run's; its budget applies to all such calls.
func WithFallback(run Run) Option {
	return func(c *config) error {
		if err := port.ValidateRunID(run.RunID); err != nil {
			return err
		}
		if run.Attribution.BillingAccountID == "" {
			return port.Invalidf("fallback needs a billing account id")
		}
		c.fallback = &run
		return nil
	}
}
