package litellm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/optcheck"
)

// Client talks to a LiteLLM proxy's management API with its master key. It is safe
// for concurrent use. Requests are retried (only idempotent ones: every request the
// Client makes is a GET) on connection errors, 429 and 5xx, honouring Retry-After,
// and never beyond the caller's context.
type Client struct {
	base *url.URL
	key  string
	rc   *retryablehttp.Client
	log  *slog.Logger
	bufs sync.Pool
}

// Option configures a Client.
type Option func(*config) error

type config struct {
	baseURL          string
	masterKey        string
	hc               *http.Client
	log              *slog.Logger
	retryMax         int
	minWait, maxWait time.Duration
}

// WithBaseURL sets the proxy's base URL, e.g. "http://127.0.0.1:4000" (required).
// A path prefix is kept: "http://gw/litellm" calls "http://gw/litellm/spend/logs/v2".
func WithBaseURL(raw string) Option {
	return func(c *config) error {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errdefs.Invalidf("base url %q is not an absolute http(s) URL", raw)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return errdefs.Invalidf("base url %q has a query or fragment", raw)
		}
		c.baseURL = raw
		return nil
	}
}

// WithMasterKey sets the key sent as "Authorization: Bearer <key>" (required).
func WithMasterKey(key string) Option {
	return func(c *config) error {
		if key == "" || strings.ContainsAny(key, "\r\n") {
			return errdefs.Invalidf("master key is empty or has a line break")
		}
		c.masterKey = key
		return nil
	}
}

// WithHTTPClient sets the underlying HTTP client (default: a pooled transport with a
// 60 s per-attempt timeout).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error { return optcheck.Set(&c.hc, hc, hc != nil, "nil http client") }
}

// WithLogger sets the logger for requests and retries (default: discard). A nil
// logger means discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.log = l
		return nil
	}
}

// WithRetry sets how often a failed idempotent request is retried (max, 0 for never)
// and the exponential backoff bounds (default 4 retries, 250 ms to 5 s). A
// Retry-After header on 429 and 503 takes precedence over the backoff.
func WithRetry(max int, minWait, maxWait time.Duration) Option {
	return func(c *config) error {
		if max < 0 || max > 100 {
			return errdefs.Invalidf("retry max %d out of range [0, 100]", max)
		}
		if minWait <= 0 || maxWait < minWait {
			return errdefs.Invalidf("retry waits must satisfy 0 < min (%s) <= max (%s)", minWait, maxWait)
		}
		c.retryMax, c.minWait, c.maxWait = max, minWait, maxWait
		return nil
	}
}

// New returns a client. It does no I/O; errors wrap errdefs.ErrInvalidSpec.
func New(opts ...Option) (*Client, error) {
	cfg := config{retryMax: 4, minWait: 250 * time.Millisecond, maxWait: 5 * time.Second}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, &errdefs.OpError{Op: "litellm.New", Err: err}
		}
	}
	if cfg.baseURL == "" {
		return nil, &errdefs.OpError{Op: "litellm.New", Err: errdefs.Invalidf("base url is required (WithBaseURL)")}
	}
	if cfg.masterKey == "" {
		return nil, &errdefs.OpError{Op: "litellm.New", Err: errdefs.Invalidf("master key is required (WithMasterKey)")}
	}
	base, _ := url.Parse(cfg.baseURL)
	base.Path = strings.TrimRight(base.Path, "/")
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	if cfg.hc == nil {
		cfg.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 60 * time.Second}
	}
	rc := &retryablehttp.Client{
		HTTPClient:   cfg.hc,
		Logger:       leveledLogger{cfg.log},
		RetryWaitMin: cfg.minWait,
		RetryWaitMax: cfg.maxWait,
		RetryMax:     cfg.retryMax,
		CheckRetry:   checkRetry,
		Backoff:      retryablehttp.DefaultBackoff,
		ErrorHandler: keepLastResponse,
	}
	return &Client{base: base, key: cfg.masterKey, rc: rc, log: cfg.log}, nil
}

// checkRetry retries connection errors, 429 and 5xx (but 501), and stops as soon as
// the request's context is done.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil
	}
	s := resp.StatusCode
	return s == http.StatusTooManyRequests || (s >= 500 && s != http.StatusNotImplemented), nil
}

// keepLastResponse hands the last response to the caller after the retries ran out,
// so its status and body become an *APIError; without a response the error stays.
func keepLastResponse(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if resp != nil && err == nil {
		return resp, nil
	}
	if resp != nil {
		_ = resp.Body.Close()
	}
	return nil, &attemptsError{n: attempts, err: err}
}

type attemptsError struct {
	n   int
	err error
}

func (e *attemptsError) Error() string { return e.err.Error() }
func (e *attemptsError) Unwrap() error { return e.err }

// leveledLogger adapts slog to retryablehttp.LeveledLogger.
type leveledLogger struct{ l *slog.Logger }

func (a leveledLogger) Error(msg string, kv ...any) { a.log(slog.LevelError, msg, kv) }
func (a leveledLogger) Info(msg string, kv ...any)  { a.log(slog.LevelInfo, msg, kv) }
func (a leveledLogger) Debug(msg string, kv ...any) { a.log(slog.LevelDebug, msg, kv) }
func (a leveledLogger) Warn(msg string, kv ...any)  { a.log(slog.LevelWarn, msg, kv) }

func (a leveledLogger) log(level slog.Level, msg string, kv []any) {
	if a.l == nil {
		return
	}
	a.l.Log(context.Background(), level, "litellm: "+msg, kv...)
}

const maxBody = 64 << 20

// getJSON reads path (with query) and decodes its JSON answer into v; an answer
// that is not v's JSON is malformed.
func (c *Client) getJSON(ctx context.Context, path string, query url.Values, v any) error {
	return c.get(ctx, path, query, func(body []byte) error {
		if err := json.Unmarshal(body, v); err != nil {
			return malformed(path, "%v", err)
		}
		return nil
	})
}

// get performs GET path?query and calls fn with the body of a 2xx response. The
// body is only valid during fn (its buffer is reused). Errors: *APIError for a non-2xx
// status, errdefs.ErrUnavailable for transport failures after retries, the context's
// error when ctx ends.
func (c *Client) get(ctx context.Context, path string, query url.Values, fn func(body []byte) error) error {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = query.Encode()
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return errdefs.Invalidf("request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	resp, err := c.rc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		attempts := 1
		var ae *attemptsError
		if errors.As(err, &ae) {
			attempts = ae.n
		}
		return &unavailableError{method: http.MethodGet, path: path, attempts: attempts, err: err}
	}
	defer func() { _ = resp.Body.Close() }()

	buf, _ := c.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() {
		if buf.Cap() <= 4<<20 { // do not pin huge buffers
			buf.Reset()
			c.bufs.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBody+1)); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return &unavailableError{method: http.MethodGet, path: path, attempts: 1, err: err}
	}
	if buf.Len() > maxBody {
		return malformed(path, "response larger than %d bytes", maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return parseAPIError(http.MethodGet, path, resp.StatusCode, buf.Bytes())
	}
	return fn(buf.Bytes())
}
