package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentsandbox/sandbox/port"
)

// closeGrace is how long Close waits for the gateway to answer its close frame.
const closeGrace = time.Second

// errClientClosed is the terminal error after Close.
var errClientClosed = fmt.Errorf("%w: Close called", ErrClosed)

// Client is a connection to an OpenClaw gateway. It is safe for concurrent use.
// One goroutine reads frames and one writes them; responses are matched to calls
// by request id, so they may arrive in any order.
//
// When the connection ends (Close, a read or write error, a protocol violation
// or silence beyond the liveness timeout) every pending call and every running
// AgentRun fails with an error wrapping ErrClosed and the cause.
type Client struct {
	conn       *websocket.Conn
	cfg        config
	log        *slog.Logger
	hello      Hello
	maxPayload int64         // the gateway's inbound limit; 0 = unknown
	liveness   time.Duration // silence after which the connection is dead

	out  chan outMsg
	done chan struct{}
	once sync.Once
	err  error // terminal error; written once before done is closed

	userClosed atomic.Bool
	foreign    atomic.Int64 // chat/agent events that belonged to no run of ours
	lastPong   atomic.Int64 // unix nanos
	idPrefix   string
	nextID     atomic.Uint64

	mu      sync.Mutex
	pending map[string]*call
	runs    map[string]*AgentRun

	wg sync.WaitGroup
}

// call is a request waiting for its response(s).
type call struct {
	method string
	ch     chan response // plain requests: exactly one response
	run    *AgentRun     // agent requests: responses go to the run
}

type outMsg struct {
	data []byte
	errc chan error
}

// Dial connects to the gateway at rawURL (ws:// or wss://), completes the
// handshake and starts the connection's reader and writer. The handshake waits
// for the gateway's connect.challenge, sends connect (protocol 3..4, client
// identity, role, scopes, token) and expects a hello-ok response.
//
// Errors: port.ErrInvalidSpec for bad options or URL; ErrAuth (with the
// *GatewayError carrying details.code such as AUTH_TOKEN_MISMATCH) for refused
// credentials; ErrProtocolMismatch; port.ErrUnavailable when the gateway cannot
// be reached or is still starting after the configured retries; the context's
// error when ctx ends first.
func Dial(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return nil, port.Invalidf("gateway URL %q must be ws:// or wss:// with a host", rawURL)
	}
	var lastErr error
	for attempt := 1; ; attempt++ {
		c, err := dialOnce(ctx, u.String(), cfg)
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
	var ge *GatewayError
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
	return backoff, errors.Is(err, port.ErrUnavailable)
}

// dialOnce makes one connection attempt.
func dialOnce(ctx context.Context, rawURL string, cfg config) (*Client, error) {
	conn, resp, err := cfg.dialer.DialContext(ctx, rawURL, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gateway: dial: %w: %w", port.ErrUnavailable, err)
	}
	limit := cfg.readLimit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	conn.SetReadLimit(limit)

	c := &Client{
		conn:     conn,
		cfg:      cfg,
		log:      cfg.logger,
		out:      make(chan outMsg),
		done:     make(chan struct{}),
		pending:  make(map[string]*call),
		runs:     make(map[string]*AgentRun),
		idPrefix: randomHex(4) + "-",
	}

	// The handshake runs synchronously; ctx ends it by expiring the deadlines.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		_ = conn.SetWriteDeadline(time.Unix(1, 0))
	})
	hello, herr := c.handshake()
	if !stop() || ctx.Err() != nil {
		_ = conn.Close()
		if herr == nil || !isGatewayErr(herr) {
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

func isGatewayErr(err error) bool {
	var ge *GatewayError
	return errors.As(err, &ge)
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
		return Hello{}, fmt.Errorf("gateway: send connect: %w: %w", port.ErrUnavailable, err)
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
			return Hello{}, fmt.Errorf("gateway: connect refused: %w", newGatewayError("connect", f.Error))
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
		return fmt.Errorf("%w: %w", port.ErrUnavailable, err)
	}
	return err
}

// start adopts the hello and launches the reader and writer.
func (c *Client) start(h Hello) {
	c.hello = h
	c.maxPayload = h.Policy.MaxPayload
	if c.cfg.readLimit == 0 && h.Policy.MaxPayload > 0 {
		// The gateway's own limit for frames it accepts is the best estimate of the
		// largest frame it will produce; leave headroom for the envelope.
		c.conn.SetReadLimit(max(h.Policy.MaxPayload, 1<<20) * 2)
	}
	tick := time.Duration(h.Policy.TickIntervalMs) * time.Millisecond
	if tick <= 0 {
		tick = defaultTickInterval
	}
	c.liveness = c.cfg.liveness
	if c.liveness == 0 {
		c.liveness = tick * 5 / 2
	}
	c.lastPong.Store(time.Now().UnixNano())
	c.conn.SetPongHandler(func(string) error {
		c.lastPong.Store(time.Now().UnixNano())
		return nil
	})
	c.log.Debug("gateway connected", "protocol", h.Protocol, "server", h.Server.Version,
		"conn", h.Server.ConnID, "tick", tick, "liveness", c.liveness, "maxPayload", h.Policy.MaxPayload)
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
}

// Hello returns what the gateway said when it accepted the connection.
func (c *Client) Hello() Hello { return c.hello }

// ForeignEvents counts the chat and agent events this connection received that
// belonged to no run of this client and were dropped. The gateway broadcasts
// every run's events to every operator connection, so a busy gateway makes this
// grow.
func (c *Client) ForeignEvents() int64 { return c.foreign.Load() }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (wrapping ErrClosed), or nil while it is open.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close sends a close frame, waits briefly for the gateway's answer, and stops
// both goroutines. Pending calls fail with ErrClosed. Close is idempotent and
// always returns nil.
func (c *Client) Close() error {
	if c.userClosed.CompareAndSwap(false, true) {
		select {
		case <-c.done:
		default:
			_ = c.conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "client closing"),
				time.Now().Add(closeGrace))
			t := time.NewTimer(closeGrace)
			select {
			case <-c.done: // the reader saw the gateway's close
			case <-t.C:
			}
			t.Stop()
		}
	}
	c.fail(errClientClosed)
	c.wg.Wait()
	return nil
}

// fail ends the connection once, recording cause.
func (c *Client) fail(cause error) {
	c.once.Do(func() {
		if c.userClosed.Load() {
			cause = errClientClosed
		}
		c.err = closedError(cause)
		close(c.done)
		_ = c.conn.Close()
		c.mu.Lock()
		runs := c.runs
		c.runs = map[string]*AgentRun{}
		c.pending = map[string]*call{}
		c.mu.Unlock()
		for _, r := range runs {
			r.finishClosed(c.err)
		}
		if !c.userClosed.Load() {
			c.log.Warn("gateway connection ended", "err", c.err)
		}
	})
}

// readLoop is the only reader of the connection.
func (c *Client) readLoop() {
	defer c.wg.Done()
	// One buffer for every frame: decoding copies what it keeps.
	var buf bytes.Buffer
	for {
		// Any frame (ticks included) proves the gateway is alive.
		_ = c.conn.SetReadDeadline(time.Now().Add(c.liveness))
		typ, r, err := c.conn.NextReader()
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			c.fail(classifyReadErr(err, false))
			return
		}
		data := buf.Bytes()
		if typ != websocket.TextMessage {
			c.fail(fmt.Errorf("%w: binary frame of %d bytes", ErrMalformedFrame, len(data)))
			return
		}
		if err := c.handleFrame(data); err != nil {
			c.fail(err)
			return
		}
	}
}

// writeLoop is the only writer of data frames; it also sends pings and checks
// that pongs come back.
func (c *Client) writeLoop() {
	defer c.wg.Done()
	ping := time.NewTicker(max(c.liveness/3, 10*time.Millisecond))
	defer ping.Stop()
	for {
		select {
		case <-c.done:
			return
		case m := <-c.out:
			_ = c.conn.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
			err := c.conn.WriteMessage(websocket.TextMessage, m.data)
			if c.cfg.afterWrite != nil {
				c.cfg.afterWrite(c)
			}
			m.errc <- err
			if err != nil {
				c.fail(fmt.Errorf("write: %w", err))
				return
			}
		case <-ping.C:
			if silent := time.Since(time.Unix(0, c.lastPong.Load())); silent > c.liveness {
				c.fail(fmt.Errorf("%w: no pong for %s", ErrLivenessTimeout, silent.Round(time.Millisecond)))
				return
			}
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.cfg.writeTimeout)); err != nil {
				c.fail(fmt.Errorf("ping: %w", err))
				return
			}
		}
	}
}

// handleFrame decodes and routes one frame. An error ends the connection.
func (c *Client) handleFrame(data []byte) error {
	var f inFrame
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedFrame, err)
	}
	switch f.Type {
	case frameRes:
		if f.ID == "" {
			return fmt.Errorf("%w: response without id", ErrMalformedFrame)
		}
		c.deliver(&f)
	case frameEvent:
		if f.Event == "" {
			return fmt.Errorf("%w: event without name", ErrMalformedFrame)
		}
		c.dispatchEvent(&f)
	case "":
		return fmt.Errorf("%w: frame without type", ErrMalformedFrame)
	default:
		// Requests from the gateway (node role) or future frame kinds: not ours.
		c.log.Debug("gateway frame ignored", "type", f.Type)
	}
	return nil
}

// deliver hands a response to the call waiting for it.
func (c *Client) deliver(f *inFrame) {
	c.mu.Lock()
	cl := c.pending[f.ID]
	if cl != nil && (cl.run == nil || !isAccepted(f)) {
		delete(c.pending, f.ID)
	}
	c.mu.Unlock()
	if cl == nil {
		c.log.Debug("gateway response for unknown request dropped", "id", f.ID)
		return
	}
	resp := response{ok: f.OK, payload: f.Payload, err: f.Error}
	if cl.run != nil {
		cl.run.onResponse(resp)
		return
	}
	select {
	case cl.ch <- resp:
	default:
		c.log.Warn("gateway duplicate response dropped", "id", f.ID, "method", cl.method)
	}
}

func isAccepted(f *inFrame) bool {
	if !f.OK || !bytes.Contains(f.Payload, []byte(`"accepted"`)) {
		return false
	}
	var p struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(f.Payload, &p) == nil && p.Status == "accepted"
}

// dispatchEvent routes chat and agent events to their run; it drops anything
// that does not belong to a run of this client (fail closed).
func (c *Client) dispatchEvent(f *inFrame) {
	switch f.Event {
	case eventChat, eventAgent:
	case eventTick:
		return
	case eventShutdown:
		c.log.Info("gateway announced shutdown", "payload", string(f.Payload))
		return
	default:
		return
	}
	var ev eventPayload
	if err := json.Unmarshal(f.Payload, &ev); err != nil {
		c.log.Debug("gateway event with undecodable payload dropped", "event", f.Event, "err", err)
		return
	}
	if ev.RunID == "" {
		c.foreign.Add(1)
		return
	}
	c.mu.Lock()
	r := c.runs[ev.RunID]
	c.mu.Unlock()
	if r == nil {
		c.foreign.Add(1)
		return
	}
	r.onEvent(f.Event, &ev)
}

// Request sends method with params (any JSON-encodable value, or nil) and waits
// for the response payload. A response with ok:false returns a *GatewayError.
// Errors also: ErrFrameTooLarge when the encoded request exceeds the gateway's
// maxPayload; ErrClosed (wrapping the cause) when the connection ends first; the
// context's error when ctx ends first.
func (c *Client) Request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if method == "" {
		return nil, port.Invalidf("empty method")
	}
	id := c.newID()
	cl := &call{method: method, ch: make(chan response, 1)}
	if err := c.register(id, cl, nil); err != nil {
		return nil, err
	}
	if err := c.sendRequest(ctx, id, method, params); err != nil {
		c.unregister(id, nil)
		return nil, err
	}
	select {
	case resp := <-cl.ch:
		if !resp.ok {
			return resp.payload, newGatewayError(method, resp.err)
		}
		return resp.payload, nil
	case <-c.done:
		// A response read before the connection ended is still the answer.
		select {
		case resp := <-cl.ch:
			if !resp.ok {
				return resp.payload, newGatewayError(method, resp.err)
			}
			return resp.payload, nil
		default:
		}
		return nil, fmt.Errorf("gateway %s: %w", method, c.err)
	case <-ctx.Done():
		c.unregister(id, nil)
		return nil, fmt.Errorf("gateway %s: %w", method, ctx.Err())
	}
}

// register records a pending call (and run) unless the connection has ended.
func (c *Client) register(id string, cl *call, r *AgentRun) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	default:
	}
	if r != nil {
		if _, dup := c.runs[r.runID]; dup {
			return port.Invalidf("agent run %q is already running on this connection", r.runID)
		}
		c.runs[r.runID] = r
	}
	c.pending[id] = cl
	return nil
}

func (c *Client) unregister(id string, r *AgentRun) {
	c.mu.Lock()
	delete(c.pending, id)
	if r != nil && c.runs[r.runID] == r {
		delete(c.runs, r.runID)
	}
	c.mu.Unlock()
}

// sendRequest encodes and queues one request frame, waiting until it is written.
func (c *Client) sendRequest(ctx context.Context, id, method string, params any) error {
	data, err := json.Marshal(requestFrame{Type: frameReq, ID: id, Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("gateway %s: encode params: %w: %w", method, port.ErrInvalidSpec, err)
	}
	if c.maxPayload > 0 && int64(len(data)) > c.maxPayload {
		return fmt.Errorf("gateway %s: %w: request of %d bytes exceeds the gateway's maxPayload %d",
			method, ErrFrameTooLarge, len(data), c.maxPayload)
	}
	m := outMsg{data: data, errc: make(chan error, 1)}
	select {
	case c.out <- m:
	case <-c.done:
		return fmt.Errorf("gateway %s: %w", method, c.err)
	case <-ctx.Done():
		return fmt.Errorf("gateway %s: %w", method, ctx.Err())
	}
	// The writer answers every message it took, within its write timeout. Waiting
	// on c.done here instead would report a request as failed whose response the
	// reader had already delivered, when the connection ends right after it.
	if err := <-m.errc; err != nil {
		return fmt.Errorf("gateway %s: %w", method, closedError(err))
	}
	return nil
}

func (c *Client) newID() string {
	return c.idPrefix + strconv.FormatUint(c.nextID.Add(1), 10)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// closeConn sends a close frame and closes the connection.
func closeConn(conn *websocket.Conn, code int, reason string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason),
		time.Now().Add(closeGrace))
	_ = conn.Close()
}
