package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
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
// AgentRun fails with an error wrapping ErrClosed and the cause. A response read
// before that moment is still delivered.
type Client struct {
	conn       *websocket.Conn
	cfg        config
	log        *slog.Logger
	hello      Hello
	maxPayload int64         // the gateway's inbound limit; 0 = unknown
	liveness   time.Duration // silence after which the connection is dead

	out  chan []byte
	done chan struct{}
	once sync.Once

	userClosed atomic.Bool
	foreign    atomic.Int64 // run events that belonged to no stream of this client
	lastPong   atomic.Int64 // unix nanos
	idPrefix   string
	nextID     atomic.Uint64

	mu      sync.Mutex
	err     error            // terminal error; set once, before done is closed
	calls   map[string]*call // calls in flight, by request id
	streams map[string]*call // calls with a stream, by run id

	wg sync.WaitGroup
}

func newClient(conn *websocket.Conn, cfg config) *Client {
	return &Client{
		conn:     conn,
		cfg:      cfg,
		log:      cfg.logger,
		out:      make(chan []byte),
		done:     make(chan struct{}),
		calls:    make(map[string]*call),
		streams:  make(map[string]*call),
		idPrefix: randomHex(4) + "-",
	}
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

// fail ends the connection once, recording cause, and ends every call in
// flight with it. A call whose response the reader already took out of the
// table is not among them: that response stands.
func (c *Client) fail(cause error) {
	c.once.Do(func() {
		if c.userClosed.Load() {
			cause = errClientClosed
		}
		err := closedError(cause)
		c.mu.Lock()
		c.err = err
		calls := c.calls
		c.calls, c.streams = nil, nil // register refuses from now on
		c.mu.Unlock()
		close(c.done)
		_ = c.conn.Close()
		for _, cl := range calls {
			cl.end(err)
		}
		if !c.userClosed.Load() {
			c.log.Warn("gateway connection ended", "err", err)
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
// that pongs come back. A failed write ends the connection, and with it every
// call in flight, the one whose frame failed included.
func (c *Client) writeLoop() {
	defer c.wg.Done()
	ping := time.NewTicker(max(c.liveness/3, 10*time.Millisecond))
	defer ping.Stop()
	for {
		select {
		case <-c.done:
			return
		case data := <-c.out:
			_ = c.conn.SetWriteDeadline(time.Now().Add(c.cfg.writeTimeout))
			err := c.conn.WriteMessage(websocket.TextMessage, data)
			if c.cfg.afterWrite != nil {
				c.cfg.afterWrite(c)
			}
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

// dispatchEvent routes run events (chat, agent) to the stream of their runId;
// it drops anything that belongs to no stream of this client (fail closed).
func (c *Client) dispatchEvent(f *inFrame) {
	switch f.Event {
	case eventChat, eventAgent:
	case eventShutdown:
		c.log.Info("gateway announced shutdown", "payload", string(f.Payload))
		return
	default: // ticks (the read itself was the liveness proof), presence, ...
		return
	}
	runID, ok := runIDOf(f.Payload)
	if !ok {
		c.log.Debug("gateway event without a usable runId dropped", "event", f.Event)
		return
	}
	var cl *call
	if len(runID) > 0 {
		c.mu.Lock()
		cl = c.streams[string(runID)]
		c.mu.Unlock()
	}
	if cl == nil {
		c.foreign.Add(1)
		return
	}
	cl.stream.event(f.Event, f.Payload)
}
