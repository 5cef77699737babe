package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentsandbox/sandbox/errdefs"
)

// A stream receives what the gateway sends for one call with more than one
// response: its responses, and the events that carry its run id. The transport
// routes to it by that id and knows nothing else about it; every method but end
// runs on the reader goroutine.
type stream interface {
	// response takes a response to the stream's request. It returns the run id
	// under which the stream's events arrive from now on ("" keeps the current
	// one) and whether more responses will follow.
	response(resp response) (runID string, more bool)
	// event takes a run event (chat, agent) whose runId is the stream's.
	event(name string, payload json.RawMessage)
	// end is called once, after the stream left the routing table: err is nil
	// when its last response came, else the connection's end.
	end(err error)
}

// call is a request in flight. It ends exactly once: whoever removes it from
// the client's table (the reader with its response, fail with the connection's
// error, or its caller giving up) ends it.
type call struct {
	id     string
	method string
	stream stream // nil: one response, delivered through done
	runID  string // the stream's routing key; guarded by Client.mu

	done chan struct{} // one-response calls: closed once resp or err is set
	resp response
	err  error
}

// end completes the call with the connection's error, or its stream with err.
func (cl *call) end(err error) {
	if cl.stream != nil {
		cl.stream.end(err)
		return
	}
	cl.err = err
	close(cl.done)
}

// requestInto is Request with the answer's payload decoded into out (and returned
// too): a payload that does not decode is ErrMalformedFrame, named by method.
func (c *Client) requestInto(ctx context.Context, method string, params, out any) (json.RawMessage, error) {
	raw, err := c.Request(ctx, method, params)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("gateway %s: %w: %v", method, ErrMalformedFrame, err)
	}
	return raw, nil
}

// Request sends method with params (any JSON-encodable value, or nil) and waits
// for the response payload. A response with ok:false returns an *Error.
// Errors also: ErrFrameTooLarge when the encoded request exceeds the gateway's
// maxPayload; ErrClosed (wrapping the cause) when the connection ends before the
// response arrived; the context's error when ctx ends first.
func (c *Client) Request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if method == "" {
		return nil, errdefs.Invalidf("empty method")
	}
	cl := &call{id: c.newID(), method: method, done: make(chan struct{})}
	if err := c.send(ctx, cl, params); err != nil {
		return nil, err
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.forget(cl) {
			return nil, fmt.Errorf("gateway %s: %w", method, ctx.Err())
		}
		<-cl.done // the reader or fail took it first: that outcome stands
	}
	if cl.err != nil {
		return nil, fmt.Errorf("gateway %s: %w", method, cl.err)
	}
	if !cl.resp.ok {
		return cl.resp.payload, newError(method, cl.resp.err)
	}
	return cl.resp.payload, nil
}

// send registers cl and hands its request frame to the writer. Once it returns
// nil, the call ends exactly once: with its response(s), or with the
// connection's error (a failed write ends the connection).
func (c *Client) send(ctx context.Context, cl *call, params any) error {
	data, err := json.Marshal(requestFrame{Type: frameReq, ID: cl.id, Method: cl.method, Params: params})
	if err != nil {
		return fmt.Errorf("gateway %s: encode params: %w: %w", cl.method, errdefs.ErrInvalidSpec, err)
	}
	if c.maxPayload > 0 && int64(len(data)) > c.maxPayload {
		return fmt.Errorf("gateway %s: %w: request of %d bytes exceeds the gateway's maxPayload %d",
			cl.method, ErrFrameTooLarge, len(data), c.maxPayload)
	}
	if err := c.register(cl); err != nil {
		return fmt.Errorf("gateway %s: %w", cl.method, err)
	}
	select {
	case c.out <- data:
		return nil
	case <-c.done: // fail has ended the call
		return fmt.Errorf("gateway %s: %w", cl.method, c.err)
	case <-ctx.Done():
		c.forget(cl)
		return fmt.Errorf("gateway %s: %w", cl.method, ctx.Err())
	}
}

// register adds cl to the table (a stream also under its run id), unless the
// connection has ended.
func (c *Client) register(cl *call) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		return c.err
	}
	if cl.stream != nil {
		if _, dup := c.streams[cl.runID]; dup {
			return errdefs.Invalidf("run %q is already running on this connection", cl.runID)
		}
		c.streams[cl.runID] = cl
	}
	c.calls[cl.id] = cl
	return nil
}

// forget removes cl from the table and reports whether it was still there,
// that is whether the caller now owns ending it.
func (c *Client) forget(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removeLocked(cl)
}

func (c *Client) removeLocked(cl *call) bool {
	if c.calls[cl.id] != cl {
		return false
	}
	delete(c.calls, cl.id)
	if cl.stream != nil && c.streams[cl.runID] == cl {
		delete(c.streams, cl.runID)
	}
	return true
}

// deliver hands a response to its call (reader goroutine).
func (c *Client) deliver(f *inFrame) {
	resp := response{ok: f.OK, payload: f.Payload, err: f.Error}
	c.mu.Lock()
	cl := c.calls[f.ID]
	if cl != nil && cl.stream == nil {
		c.removeLocked(cl)
	}
	c.mu.Unlock()
	switch {
	case cl == nil:
		c.log.Debug("gateway response for unknown request dropped", "id", f.ID)
	case cl.stream == nil:
		cl.resp = resp
		close(cl.done)
	default:
		runID, more := cl.stream.response(resp)
		c.mu.Lock()
		owned := false
		switch {
		case !more:
			owned = c.removeLocked(cl)
		case runID != "" && runID != cl.runID && c.calls[cl.id] == cl:
			// The gateway named the run differently: route its events by that name.
			if c.streams[cl.runID] == cl {
				delete(c.streams, cl.runID)
			}
			cl.runID = runID
			c.streams[runID] = cl
		}
		c.mu.Unlock()
		if owned {
			cl.stream.end(nil)
		}
	}
}

func (c *Client) newID() string {
	return c.idPrefix + strconv.FormatUint(c.nextID.Add(1), 10)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	b := []byte(randomHex(16))
	b[12] = '4'
	b[16] = "89ab"[int(b[16])%4]
	return string(b[0:8]) + "-" + string(b[8:12]) + "-" + string(b[12:16]) + "-" + string(b[16:20]) + "-" + string(b[20:32])
}
