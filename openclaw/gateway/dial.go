package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/optcheck"
)

// Dial connects to the gateway at rawURL (ws:// or wss://), completes the
// handshake and starts the connection's reader and writer. The handshake waits
// for the gateway's connect.challenge, sends connect (protocol 3..4, client
// identity, role, scopes, token) and expects a hello-ok response. With
// WithDialContext the URL's host names the gateway (Host header, TLS server
// name) and the dial function decides where the bytes go.
//
// Errors: errdefs.ErrInvalidSpec for bad options or URL; ErrAuth (with the
// *Error carrying details.code such as AUTH_TOKEN_MISMATCH) for refused
// credentials; ErrProtocolMismatch; errdefs.ErrUnavailable when the gateway
// cannot be reached or is still starting after the configured retries; the
// context's error when ctx ends first.
func Dial(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	if err := optcheck.Apply(&cfg, opts); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return nil, errdefs.Invalidf("gateway URL %q must be ws:// or wss:// with a host", rawURL)
	}
	dialer := cfg.wsDialer()
	var lastErr error
	for attempt := 1; ; attempt++ {
		c, err := dialOnce(ctx, dialer, u.String(), cfg)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gateway: dial %s: %w (last error: %v)", u.Redacted(), ctx.Err(), lastErr)
		}
		wait, retry := retryDelay(err, cfg.backoff)
		if !retry || attempt >= cfg.attempts {
			return nil, err
		}
		cfg.logger.Debug("gateway dial failed; retrying", "attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("gateway: dial %s: %w (last error: %v)", u.Redacted(), ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

// retryDelay says whether a failed attempt may be retried and after how long.
func retryDelay(err error, backoff time.Duration) (time.Duration, bool) {
	var ge *Error
	if errors.As(err, &ge) {
		if !ge.Retryable {
			return 0, false
		}
		if ge.RetryAfter > 0 {
			return ge.RetryAfter, true
		}
		return backoff, true
	}
	// Transport failures (refused, reset, closed mid-handshake) are what a gateway
	// that is still starting looks like.
	return backoff, errors.Is(err, errdefs.ErrUnavailable)
}

// dialOnce makes one connection attempt.
func dialOnce(ctx context.Context, dialer *websocket.Dialer, rawURL string, cfg config) (*Client, error) {
	conn, resp, err := dialer.DialContext(ctx, rawURL, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gateway: dial: %w: %w", errdefs.ErrUnavailable, err)
	}
	limit := cfg.readLimit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	conn.SetReadLimit(limit)

	c := newClient(conn, cfg)
	// The handshake runs synchronously; ctx ends it by expiring the deadlines.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		_ = conn.SetWriteDeadline(time.Unix(1, 0))
	})
	hello, herr := c.handshake()
	if !stop() || ctx.Err() != nil {
		_ = conn.Close()
		var ge *Error
		if herr == nil || !errors.As(herr, &ge) {
			return nil, fmt.Errorf("gateway: handshake: %w", ctx.Err())
		}
		return nil, herr
	}
	if herr != nil {
		closeConn(conn, websocket.CloseNormalClosure, "handshake failed")
		return nil, herr
	}
	_ = conn.SetReadDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Time{})
	c.start(hello)
	return c, nil
}

// handshake performs challenge → connect → hello-ok on the bare connection.
func (c *Client) handshake() (Hello, error) {
	// 1. connect.challenge. The nonce only matters for device-signed connects,
	// but the gateway expects connect after it.
	for {
		f, err := c.readHandshakeFrame()
		if err != nil {
			return Hello{}, err
		}
		if f.Type == frameEvent && f.Event == eventChallenge {
			var ch struct {
				Nonce string `json:"nonce"`
			}
			if err := json.Unmarshal(f.Payload, &ch); err != nil || ch.Nonce == "" {
				return Hello{}, fmt.Errorf("gateway: handshake: %w: connect.challenge without nonce", ErrMalformedFrame)
			}
			break
		}
		c.log.Debug("gateway frame before challenge ignored", "type", f.Type, "event", f.Event)
	}

	// 2. connect.
	params := connectParams{
		MinProtocol: MinProtocol,
		MaxProtocol: MaxProtocol,
		Client:      c.cfg.client,
		Role:        c.cfg.role,
		Scopes:      c.cfg.scopes,
	}
	if c.cfg.token != "" {
		params.Auth = &connectAuth{Token: c.cfg.token}
	}
	id := c.newID()
	data, err := json.Marshal(requestFrame{Type: frameReq, ID: id, Method: "connect", Params: params})
	if err != nil {
		return Hello{}, fmt.Errorf("gateway: encode connect: %w", err)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
	if err := c.conn.WriteMessage(websocket.TextMessage, data); err != nil {
		return Hello{}, fmt.Errorf("gateway: send connect: %w: %w", errdefs.ErrUnavailable, err)
	}

	// 3. The response; events (ticks, presence) may come first.
	for {
		f, err := c.readHandshakeFrame()
		if err != nil {
			return Hello{}, err
		}
		if f.Type != frameRes || f.ID != id {
			continue
		}
		if !f.OK {
			return Hello{}, fmt.Errorf("gateway: connect refused: %w", newError("connect", f.Error))
		}
		var h Hello
		var kind struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(f.Payload, &kind); err != nil || kind.Type != "hello-ok" {
			return Hello{}, fmt.Errorf("gateway: connect: %w: expected hello-ok, got %.200s", ErrMalformedFrame, f.Payload)
		}
		if err := json.Unmarshal(f.Payload, &h); err != nil {
			return Hello{}, fmt.Errorf("gateway: connect: %w: hello-ok: %v", ErrMalformedFrame, err)
		}
		if h.Protocol < MinProtocol || h.Protocol > MaxProtocol {
			return Hello{}, fmt.Errorf("gateway: connect: %w: gateway chose protocol %d, client speaks %d..%d",
				ErrProtocolMismatch, h.Protocol, MinProtocol, MaxProtocol)
		}
		return h, nil
	}
}

// readHandshakeFrame reads and decodes one frame during the handshake.
func (c *Client) readHandshakeFrame() (*inFrame, error) {
	typ, data, err := c.conn.ReadMessage()
	if err != nil {
		return nil, fmt.Errorf("gateway: handshake: %w", classifyReadErr(err, true))
	}
	if typ != websocket.TextMessage {
		return nil, fmt.Errorf("gateway: handshake: %w: binary frame", ErrMalformedFrame)
	}
	f := new(inFrame)
	if err := json.Unmarshal(data, f); err != nil || f.Type == "" {
		return nil, fmt.Errorf("gateway: handshake: %w: %.200q", ErrMalformedFrame, data)
	}
	return f, nil
}

// classifyReadErr maps gorilla read errors onto the package sentinels.
func classifyReadErr(err error, handshake bool) error {
	if errors.Is(err, websocket.ErrReadLimit) {
		return fmt.Errorf("%w: %w", ErrFrameTooLarge, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !handshake {
		return fmt.Errorf("%w: %w", ErrLivenessTimeout, err)
	}
	if handshake {
		// A gateway that closes during the handshake is usually starting or
		// restarting: retryable.
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	return err
}

// closeConn sends a close frame and closes the connection.
func closeConn(conn *websocket.Conn, code int, reason string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason),
		time.Now().Add(closeGrace))
	_ = conn.Close()
}
