package proxyd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/portconv"
	"github.com/agentsandbox/sandbox/port"
)

// Client is the typed client of the daemon's admin API. It is safe for
// concurrent use; New does no I/O (Health checks the daemon).
type Client struct {
	hc *http.Client
}

// NewClient returns a client of the admin API on the unix socket at path.
// Errors wrap port.ErrInvalidSpec.
func NewClient(path string) (*Client, error) {
	if !filepath.IsAbs(path) {
		return nil, port.Invalidf("proxyd: admin socket %q is not absolute", path)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
		Proxy:               nil,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr}}, nil
}

// Close closes idle connections to the daemon.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// do sends a request and decodes a JSON answer into out (unless nil). Errors:
// port.ErrUnavailable when the daemon cannot be reached; otherwise the answer's
// code as a sentinel (proxydapi.FromAPIError: invalid_spec: ErrInvalidSpec,
// not_found: ErrNotFound, unsupported: ErrUnsupported, unavailable:
// ErrUnavailable, forbidden: ErrPermissionDenied, else ErrInternal) with its
// message.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://proxyd"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(out); err != nil {
		return fmt.Errorf("%w: proxyd: bad answer: %w", port.ErrInternal, err)
	}
	return nil
}

// decodeError reads an error answer through the API's one error table.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return proxydapi.FromAPIError(resp.StatusCode, b)
}

// Health reports the daemon's health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, PathHealth, nil, &h)
	return h, err
}

// Register registers a run; its socket accepts connections when Register returns.
func (c *Client) Register(ctx context.Context, req RegisterRequest) (Registered, error) {
	var out Registered
	err := c.do(ctx, http.MethodPost, PathRuns, req, &out)
	return out, err
}

// Deregister ends a run, giving calls in flight grace (0 cuts them at once), and
// returns its audit.
func (c *Client) Deregister(ctx context.Context, id string, grace time.Duration) (DeregisterResponse, error) {
	var out DeregisterResponse
	err := c.do(ctx, http.MethodDelete, PathRuns+"/"+url.PathEscape(id)+"?grace="+grace.String(), nil, &out)
	return out, err
}

// List lists the registered runs.
func (c *Client) List(ctx context.Context) ([]RunInfo, error) {
	var out []RunInfo
	err := c.do(ctx, http.MethodGet, PathRuns, nil, &out)
	return out, err
}

// Audit returns a run's stored records after seq after (0: from the start).
func (c *Client) Audit(ctx context.Context, id string, after int64) (AuditPage, error) {
	var out AuditPage
	err := c.do(ctx, http.MethodGet, PathRuns+"/"+url.PathEscape(id)+"/audit?after="+strconv.FormatInt(after, 10), nil, &out)
	return out, err
}

// Attestation returns what the run's bridge attested, nil before it did.
func (c *Client) Attestation(ctx context.Context, id string) (*port.Attestation, error) {
	var out proxydapi.AttestationAnswer
	if err := c.do(ctx, http.MethodGet, PathRuns+"/"+url.PathEscape(id)+"/attestation", nil, &out); err != nil {
		return nil, err
	}
	return portconv.Attestation(out.Attestation)
}

// EgressAudit returns a run's egress records so far.
func (c *Client) EgressAudit(ctx context.Context, id string) ([]port.EgressRecord, error) {
	var out EgressAudit
	err := c.do(ctx, http.MethodGet, PathRuns+"/"+url.PathEscape(id)+"/egress", nil, &out)
	return portconv.EgressRecords(out.Records), err
}

// send sends req: a failure to reach the daemon is port.ErrUnavailable, unless ctx
// ended (its error).
func (c *Client) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: proxyd: %w", port.ErrUnavailable, err)
	}
	return resp, nil
}

// StreamAudit calls fn with every record of the run stored after seq after, as
// they are stored, until the run ends (nil), ctx ends, or fn fails (its error).
func (c *Client) StreamAudit(ctx context.Context, id string, after int64, fn func(AuditEntry) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://proxyd"+PathRuns+"/"+url.PathEscape(id)+"/audit/stream?after="+strconv.FormatInt(after, 10), nil)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("%w: proxyd: bad audit line: %w", port.ErrInternal, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: proxyd: audit stream cut: %w", port.ErrUnavailable, err)
	}
	return nil
}
