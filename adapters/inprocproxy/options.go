package inprocproxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Option configures a Manager. Options validate their arguments; New returns the first
// error, wrapping port.ErrInvalidSpec (or port.ErrUnsupported for WithSandboxUID on a
// platform without SO_PEERCRED).
type Option func(*config) error

type config struct {
	baseDir         string
	owner           string
	logger          *slog.Logger
	transport       http.RoundTripper
	sandboxUID      int // -1: no peer check
	maxRequestBytes int64
	tokenEstimate   int64 // 0: llmproxy.DefaultTokenEstimate
	connsPerRun     int
	connsTotal      int
	egress          egressConfig
	tp              trace.TracerProvider // nil: the global provider
	mp              metric.MeterProvider // nil: the global provider
}

// DefaultMaxRequestBytes bounds a request body unless WithMaxRequestBytes says otherwise.
// It is generous (images inline as base64 are large) but keeps one agent from streaming
// an endless body through the host process.
const DefaultMaxRequestBytes = 64 << 20

// DefaultBaseDirName is the directory under os.TempDir() used when WithBaseDir is not given.
const DefaultBaseDirName = "agentsandbox-proxy"

// maxSocketPath is the longest socket path accepted. Linux allows 107 bytes plus the NUL;
// 104 also fits the BSDs and macOS.
const maxSocketPath = 104

// randSuffixLen is the length of the random hex suffix of a per-run directory name.
const randSuffixLen = 12

func defaultConfig() config {
	return config{
		baseDir:         filepath.Join(os.TempDir(), DefaultBaseDirName),
		owner:           port.DefaultOwner,
		logger:          slog.New(slog.DiscardHandler),
		sandboxUID:      -1,
		maxRequestBytes: DefaultMaxRequestBytes,
		connsPerRun:     llmproxy.DefaultConnsPerRun,
		connsTotal:      llmproxy.DefaultConnsTotal,
	}
}

// WithBaseDir sets the host directory under which per-run directories are made (as
// <dir>/<owner>/<run>-<random>). It must be absolute and short enough that socket paths
// fit the kernel's limit of about 104 bytes. It is created (mode 0700) on first use; an
// existing directory must not be writable by other users. Default:
// os.TempDir()/agentsandbox-proxy.
func WithBaseDir(dir string) Option {
	return func(c *config) error { return optcheck.AbsDir(&c.baseDir, dir, "base dir") }
}

// WithOwner sets the owner label value (the rules of port.ValidateRunID). Sweeps only touch
// directories of their owner, so host processes sharing a base directory must use
// distinct owners. Default: port.DefaultOwner.
func WithOwner(owner string) Option {
	return func(c *config) error { return runner.SetOwner(&c.owner, owner) }
}

// WithLogger sets the logger; by default nothing is logged. Keys and prompts are never
// logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { return optcheck.Logger(&c.logger, l) }
}

// WithTransport sets the RoundTripper used to reach the upstream. It should not time out
// on slow responses: streamed completions can run for minutes. There is deliberately no
// WithHTTPClient: an http.Client's Timeout would cut long streams. The default is an
// http.Transport that ignores proxy environment variables (the key must not travel
// through a proxy nobody configured for it), dials with a 10 s timeout, and sets no
// response timeouts.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *config) error { return optcheck.NotNil(&c.transport, rt, "transport is nil") }
}

// WithSandboxUID makes every proxy accept connections only from processes running as
// uid (the sandbox user; with Docker's default user mapping a container's uid is its
// host uid) or as the host process's own effective uid, checked by the kernel
// (SO_PEERCRED) when each connection is accepted. Other peers are disconnected and
// logged. Only Linux supports it; elsewhere New fails with port.ErrUnsupported.
func WithSandboxUID(uid int) Option {
	return func(c *config) error {
		if uid < 0 {
			return port.Invalidf("sandbox uid %d is negative", uid)
		}
		if !peerCredSupported {
			return fmt.Errorf("%w: peer credential checks (SO_PEERCRED) need Linux", port.ErrUnsupported)
		}
		c.sandboxUID = uid
		return nil
	}
}

// WithMaxRequestBytes bounds each request body (default DefaultMaxRequestBytes). A
// request declaring a larger Content-Length gets HTTP 413 without reaching the upstream.
func WithMaxRequestBytes(n int64) Option {
	return func(c *config) error { return optcheck.Positive(&c.maxRequestBytes, n, "max request bytes") }
}

// WithTokenEstimate sets the output cap a call gets under a run's token budget
// (port.Budget.MaxTokens) when it names no max_tokens (default 4096): the proxy
// writes it into the body (lowered to what the budget has left) and reserves
// it. Calls in flight hold their reservations, so concurrent calls cannot
// overshoot the budget by more than one call's excess.
func WithTokenEstimate(n int64) Option {
	return func(c *config) error { return optcheck.Positive(&c.tokenEstimate, n, "token estimate") }
}

// WithConnLimits caps the connections open at once to one run's proxy (default
// 64) and to all proxies of the manager (default 1024). Connections past a cap
// wait in the kernel's listen queue until one closes, so a run that opens
// thousands of connections holds at most perRun of the host's descriptors and
// cannot starve other runs.
func WithConnLimits(perRun, total int) Option {
	return func(c *config) error {
		if perRun <= 0 || total < perRun {
			return port.Invalidf("connection limits %d per run, %d in total: want 0 < per run <= total", perRun, total)
		}
		c.connsPerRun, c.connsTotal = perRun, total
		return nil
	}
}

// WithTracerProvider sets where the proxies' call spans go (default: the global
// provider). A call's span is a client span following the GenAI semantic
// conventions, child of the span in the context given to Start (the facade's run),
// and its W3C traceparent is what the upstream receives.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error { return optcheck.NotNil(&c.tp, tp, "tracer provider is nil") }
}

// WithMeterProvider sets where the proxies' call metrics go (default: the global
// provider): gen_ai.client.operation.duration, gen_ai.client.token.usage,
// sandbox.llm.calls by outcome and sandbox.llm.refusals by rule.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error { return optcheck.NotNil(&c.mp, mp, "meter provider is nil") }
}
