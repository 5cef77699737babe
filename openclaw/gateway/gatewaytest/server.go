// Package gatewaytest provides a scripted OpenClaw gateway double: an
// httptest-based WebSocket server that speaks the gateway's frames (protocol 4),
// performs the real handshake (challenge, connect validation, token check,
// hello-ok) and hands each accepted connection to a handler that scripts the
// rest: responses in any order, broadcast events for other sessions, malformed
// or oversized frames, closing mid-run. The default handler (EchoAgent, one
// request at a time through Conn.Serve) answers agent runs, chat.abort,
// agent.wait and sessions.patch, and serves a config through config.get and
// config.patch (WithConfig). WithListener serves on any listener, such as a
// unix socket.
//
// It follows the gateway's observable behaviour: connect and agent parameters
// are closed schemas (unknown keys are refused with INVALID_REQUEST), a wrong
// token gets ok:false with details.code AUTH_TOKEN_MISMATCH and close 1008, a
// client whose protocol range excludes the server's gets PROTOCOL_MISMATCH, and
// a starting gateway answers UNAVAILABLE with retryAfterMs and closes, and
// config.patch needs the hash of the config it changes.
package gatewaytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// ProtocolVersion is the protocol the double speaks by default.
const ProtocolVersion = 4

// Server is a running gateway double. Create it with NewServer and stop it
// with Close.
type Server struct {
	// URL is the ws:// address clients dial. With WithListener on a listener
	// that is not TCP it is "ws://gatewaytest.invalid": clients reach the server
	// with a dial function of their own.
	URL string

	token         string
	protocol      int
	unavailable   int
	retryAfterMs  int64
	tickInterval  time.Duration
	autoTick      bool
	maxPayload    int64
	handler       func(*Conn)
	agentIDs      map[string]bool
	methods       []string
	serverVersion string
	listener      net.Listener

	cfgMu     sync.Mutex
	config    map[string]any
	cfgHash   string
	cfgWrites int

	hs       *httptest.Server
	upgrader websocket.Upgrader
	connects atomic.Int64

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Option configures a Server.
type Option func(*Server)

// WithToken makes the server require auth.token == token.
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// WithProtocol sets the protocol version the server speaks (default 4).
func WithProtocol(v int) Option { return func(s *Server) { s.protocol = v } }

// WithUnavailable makes the first n connect attempts fail like a gateway that is
// still starting: UNAVAILABLE, retryable, retryAfterMs, then close 1013.
func WithUnavailable(n int, retryAfter time.Duration) Option {
	return func(s *Server) { s.unavailable, s.retryAfterMs = n, retryAfter.Milliseconds() }
}

// WithTickInterval sets policy.tickIntervalMs (default 30s) and whether the
// server sends tick events at that interval (default true).
func WithTickInterval(d time.Duration, send bool) Option {
	return func(s *Server) { s.tickInterval, s.autoTick = d, send }
}

// WithMaxPayload sets policy.maxPayload and the server's own read limit
// (default 25 MiB).
func WithMaxPayload(n int64) Option { return func(s *Server) { s.maxPayload = n } }

// WithHandler sets what happens on each accepted connection (default EchoAgent).
// The handler runs in its own goroutine; the connection stays open after it
// returns, until the client or the test closes it. A handler must return once
// the connection has ended (Next fails, Closed is closed): Server.Close waits
// for it.
func WithHandler(h func(*Conn)) Option { return func(s *Server) { s.handler = h } }

// WithListener makes the server accept connections on ln, for example a unix
// socket, instead of on a new loopback TCP port. Close closes ln.
func WithListener(ln net.Listener) Option { return func(s *Server) { s.listener = ln } }

// NewServer starts a gateway double on a loopback port (or WithListener's listener).
func NewServer(opts ...Option) *Server {
	s := &Server{
		protocol:      ProtocolVersion,
		retryAfterMs:  100,
		tickInterval:  30 * time.Second,
		autoTick:      true,
		maxPayload:    25 << 20,
		handler:       EchoAgent,
		agentIDs:      map[string]bool{"main": true},
		serverVersion: "gatewaytest",
		methods:       []string{"agent", "agent.wait", "chat.abort", "sessions.patch", "config.get", "config.patch", "health"},
		conns:         map[*Conn]struct{}{},
		config:        map[string]any{},
	}
	for _, o := range opts {
		o(s)
	}
	s.cfgHash = hashConfig(s.config)
	s.upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	if s.listener == nil {
		s.hs = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
		s.URL = "ws" + strings.TrimPrefix(s.hs.URL, "http")
		return s
	}
	s.hs = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	_ = s.hs.Listener.Close()
	s.hs.Listener = s.listener
	s.hs.Start()
	s.URL = "ws://gatewaytest.invalid"
	if _, tcp := s.listener.Addr().(*net.TCPAddr); tcp {
		s.URL = "ws://" + s.listener.Addr().String()
	}
	return s
}

// Close closes every connection abruptly and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Drop()
	}
	s.hs.CloseClientConnections()
	s.hs.Close()
	s.wg.Wait()
}

// ConnectAttempts reports how many connect requests the server has seen.
func (s *Server) ConnectAttempts() int { return int(s.connects.Load()) }

// Conns returns the currently open, accepted connections.
func (s *Server) Conns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Broadcast sends an event to every accepted connection, as the real gateway
// does with chat and agent events.
func (s *Server) Broadcast(event string, payload any) {
	for _, c := range s.Conns() {
		_ = c.Event(event, payload)
	}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(s.maxPayload)
	c := &Conn{s: s, ws: ws, reqs: make(chan Request, 1024), closed: make(chan struct{}), ID: randomHex(6)}
	if !s.handshake(c) {
		return
	}
	go func() {
		defer s.wg.Done()
		if s.autoTick && s.tickInterval > 0 {
			c.tickLoop(s.tickInterval)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.handler(c)
	}()
	c.readLoop() // returns when the connection ends
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// handshake runs challenge → connect → hello-ok; false means it refused.
func (s *Server) handshake(c *Conn) bool {
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = c.ws.SetReadDeadline(time.Time{}) }()
	if err := c.Event("connect.challenge", map[string]any{"nonce": randomHex(16), "ts": time.Now().UnixMilli()}); err != nil {
		_ = c.ws.Close()
		return false
	}
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		_ = c.ws.Close()
		return false
	}
	var f struct {
		Type   string          `json:"type"`
		ID     string          `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(data, &f) != nil || f.Type != "req" || f.ID == "" {
		c.Close(websocket.ClosePolicyViolation, "invalid request frame")
		return false
	}
	if f.Method != "connect" {
		_ = c.ReplyError(f.ID, Error{Code: "INVALID_REQUEST", Message: "invalid handshake: first request must be connect"}, nil)
		c.Close(websocket.ClosePolicyViolation, "invalid-handshake")
		return false
	}
	s.connects.Add(1)
	var p ConnectParams
	if err := checkConnectParams(f.Params, &p); err != nil {
		_ = c.ReplyError(f.ID, Error{Code: "INVALID_REQUEST", Message: "invalid connect params: " + err.Error()}, nil)
		c.Close(websocket.ClosePolicyViolation, "invalid-handshake")
		return false
	}
	c.Connect = p
	if int(s.connects.Load()) <= s.unavailable {
		_ = c.ReplyError(f.ID, Error{Code: "UNAVAILABLE", Message: "gateway starting; retry shortly",
			Retryable: true, RetryAfterMs: s.retryAfterMs}, nil)
		c.Close(websocket.CloseTryAgainLater, "gateway starting")
		return false
	}
	if p.MinProtocol > s.protocol || p.MaxProtocol < s.protocol {
		_ = c.ReplyError(f.ID, Error{Code: "INVALID_REQUEST", Message: "protocol mismatch", Details: map[string]any{
			"code": "PROTOCOL_MISMATCH", "clientMinProtocol": p.MinProtocol, "clientMaxProtocol": p.MaxProtocol,
			"expectedProtocol": s.protocol,
		}}, nil)
		c.Close(websocket.CloseProtocolError, "protocol mismatch")
		return false
	}
	if s.token != "" && p.Auth.Token != s.token {
		code := "AUTH_TOKEN_MISMATCH"
		if p.Auth.Token == "" {
			code = "AUTH_TOKEN_MISSING"
		}
		msg := "unauthorized: gateway token mismatch"
		_ = c.ReplyError(f.ID, Error{Code: "INVALID_REQUEST", Message: msg, Details: map[string]any{
			"code": code, "authReason": "token_mismatch", "canRetryWithDeviceToken": false,
		}}, nil)
		c.Close(websocket.ClosePolicyViolation, msg)
		return false
	}
	hello := map[string]any{
		"type":     "hello-ok",
		"protocol": s.protocol,
		"server":   map[string]any{"version": s.serverVersion, "connId": c.ID, "bootId": "double"},
		"features": map[string]any{"methods": s.methods, "events": []string{"chat", "agent", "tick", "shutdown"}},
		"snapshot": map[string]any{"presence": []any{}, "health": map[string]any{}},
		"auth":     map[string]any{"method": "token", "role": p.Role, "scopes": p.Scopes},
		"policy": map[string]any{
			"maxPayload": s.maxPayload, "maxBufferedBytes": 2 * s.maxPayload,
			"tickIntervalMs": s.tickInterval.Milliseconds(),
		},
		// Fields beyond the schema, as real gateways send: clients must ignore them.
		"controlUiUrl": "http://127.0.0.1/",
	}
	// Track the connection before the client can see hello-ok, so that Conns
	// lists it as soon as Dial returns.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Drop()
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(3)
	s.mu.Unlock()
	if err := c.Reply(f.ID, hello); err != nil {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(-3)
		c.Drop()
		return false
	}
	return true
}

// ConnectParams is what the client sent in connect.
type ConnectParams struct {
	MinProtocol int `json:"minProtocol"`
	MaxProtocol int `json:"maxProtocol"`
	Client      struct {
		ID       string `json:"id"`
		Version  string `json:"version"`
		Platform string `json:"platform"`
		Mode     string `json:"mode"`
	} `json:"client"`
	Role   string   `json:"role"`
	Scopes []string `json:"scopes"`
	Auth   struct {
		Token string `json:"token"`
	} `json:"auth"`
	// Raw is the params object as sent.
	Raw json.RawMessage `json:"-"`
}

var (
	connectKeys = set("minProtocol", "maxProtocol", "client", "caps", "commands", "permissions", "pathEnv",
		"role", "scopes", "device", "auth", "locale", "userAgent", "modelCatalog")
	clientKeys  = set("id", "displayName", "version", "buildId", "platform", "deviceFamily", "modelIdentifier", "timeZone", "mode", "instanceId")
	authKeys    = set("token", "bootstrapToken", "deviceToken", "password")
	clientIDs   = set("webchat-ui", "openclaw-control-ui", "webchat", "cli", "gateway-client", "node-host", "test", "fingerprint", "openclaw-probe")
	clientModes = set("webchat", "cli", "ui", "backend", "node", "probe", "test")
	// AgentParamKeys are the keys the double accepts in agent params (a subset of
	// the gateway's closed schema covering what backend clients use).
	AgentParamKeys = set("message", "agentId", "provider", "model", "to", "replyTo", "sessionId", "sessionKey",
		"thinking", "deliver", "attachments", "channel", "timeout", "lane", "extraSystemPrompt",
		"idempotencyKey", "label", "promptMode")
	// closedSchemas are the methods whose params the double checks for unknown keys.
	closedSchemas = map[string]map[string]bool{
		"agent":          AgentParamKeys,
		"chat.abort":     set("sessionKey", "agentId", "runId", "preserveSideRuns"),
		"sessions.patch": set("key", "agentId", "model", "thinkingLevel", "label", "expectedSessionId"),
		"agent.wait":     set("runId", "timeoutMs"),
		"config.get":     set(),
		"config.patch":   set("raw", "baseHash", "sessionKey", "deliveryContext", "note", "restartDelayMs", "replacePaths"),
	}
)

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// checkKeys refuses keys outside allowed, as the gateway's closed schemas do.
func checkKeys(raw json.RawMessage, allowed map[string]bool, what string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%s must be an object", what)
	}
	for k := range m {
		if !allowed[k] {
			return nil, fmt.Errorf("%s: unexpected property '%s'", what, k)
		}
	}
	return m, nil
}

func checkConnectParams(raw json.RawMessage, p *ConnectParams) error {
	m, err := checkKeys(raw, connectKeys, "connect params")
	if err != nil {
		return err
	}
	if _, err := checkKeys(m["client"], clientKeys, "client"); err != nil {
		return err
	}
	if a, ok := m["auth"]; ok {
		if _, err := checkKeys(a, authKeys, "auth"); err != nil {
			return err
		}
	}
	if err := json.Unmarshal(raw, p); err != nil {
		return err
	}
	p.Raw = append(json.RawMessage(nil), raw...)
	switch {
	case p.MinProtocol < 1 || p.MaxProtocol < 1:
		return errors.New("minProtocol and maxProtocol must be >= 1")
	case !clientIDs[p.Client.ID]:
		return fmt.Errorf("client.id %q is not a known client id", p.Client.ID)
	case !clientModes[p.Client.Mode]:
		return fmt.Errorf("client.mode %q is not a known mode", p.Client.Mode)
	case p.Client.Version == "" || p.Client.Platform == "":
		return errors.New("client.version and client.platform are required")
	}
	if p.Role == "" {
		p.Role = "operator"
	}
	return nil
}

// Request is a request frame from the client.
type Request struct {
	ID     string
	Method string
	Params json.RawMessage
}

// Decode decodes the params into v.
func (r Request) Decode(v any) error { return json.Unmarshal(r.Params, v) }

// Error is a gateway error shape.
type Error struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	Details      any    `json:"details,omitempty"`
	Retryable    bool   `json:"retryable,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
}

// Conn is one accepted client connection. Its methods are safe for concurrent use.
type Conn struct {
	// ID is the connection id the server announced in hello-ok.
	ID string
	// Connect is what the client sent in connect.
	Connect ConnectParams

	s      *Server
	ws     *websocket.Conn
	wmu    sync.Mutex
	seq    atomic.Int64
	reqs   chan Request
	closed chan struct{}
	once   sync.Once
}

// Next returns the next request from the client. Requests to agent, chat.abort,
// sessions.patch, agent.wait, config.get and config.patch whose params carry
// unknown keys are answered with INVALID_REQUEST here and skipped, as the
// gateway's closed schemas do.
func (c *Conn) Next(ctx context.Context) (Request, error) {
	for {
		select {
		case r := <-c.reqs:
			if keys, ok := closedSchemas[r.Method]; ok {
				if _, err := checkKeys(r.Params, keys, r.Method+" params"); err != nil {
					_ = c.ReplyError(r.ID, Error{Code: "INVALID_REQUEST", Message: "invalid " + r.Method + " params: " + err.Error()}, nil)
					continue
				}
			}
			return r, nil
		case <-c.closed:
			return Request{}, errors.New("gatewaytest: connection closed")
		case <-ctx.Done():
			return Request{}, ctx.Err()
		}
	}
}

// Closed is closed when the connection has ended.
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Reply sends {type:"res", id, ok:true, payload}.
func (c *Conn) Reply(id string, payload any) error {
	return c.SendJSON(map[string]any{"type": "res", "id": id, "ok": true, "payload": payload})
}

// ReplyError sends {type:"res", id, ok:false, error[, payload]}.
func (c *Conn) ReplyError(id string, e Error, payload any) error {
	f := map[string]any{"type": "res", "id": id, "ok": false, "error": e}
	if payload != nil {
		f["payload"] = payload
	}
	return c.SendJSON(f)
}

// Event sends {type:"event", event, payload, seq} with a per-connection sequence.
func (c *Conn) Event(event string, payload any) error {
	return c.SendJSON(map[string]any{"type": "event", "event": event, "payload": payload, "seq": c.seq.Add(1)})
}

// SendJSON sends v encoded as one text frame.
func (c *Conn) SendJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Send(data)
}

// Send sends raw bytes as one text frame (for malformed or oversized frames).
func (c *Conn) Send(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// Close sends a close frame with code and reason, then closes the connection.
func (c *Conn) Close(code int, reason string) {
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.Drop()
}

// Drop closes the connection without a close frame, like a crashed gateway.
func (c *Conn) Drop() {
	_ = c.ws.Close()
	c.once.Do(func() { close(c.closed) })
}

func (c *Conn) readLoop() {
	defer c.Drop()
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var f struct {
			Type   string          `json:"type"`
			ID     string          `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(data, &f) != nil || f.Type != "req" || f.ID == "" || f.Method == "" {
			c.Close(websocket.ClosePolicyViolation, "invalid-frame")
			return
		}
		select {
		case c.reqs <- Request{ID: f.ID, Method: f.Method, Params: f.Params}:
		default:
			_ = c.ReplyError(f.ID, Error{Code: "UNAVAILABLE", Message: "The server is busy. Please try again in a moment.", Retryable: true}, nil)
		}
	}
}

func (c *Conn) tickLoop(d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
			if c.Event("tick", map[string]any{"ts": time.Now().UnixMilli()}) != nil {
				return
			}
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
