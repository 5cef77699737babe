package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/errdefs"
)

// maxQueuedUpdates bounds the updates a run keeps for a consumer that does not
// read them; beyond it updates are counted and dropped (the final answer still
// comes complete from the gateway's final response).
const maxQueuedUpdates = 1 << 16

// UpdateKind says what an Update carries.
type UpdateKind int

// Update kinds.
const (
	// UpdateText is answer text: Text extends what came before, or replaces all
	// of it when Replace is set. Heartbeat acknowledgements never appear here.
	UpdateText UpdateKind = iota + 1
	// UpdateState is a chat state change: State is "status" (with Phase),
	// "final", "aborted" or "error" (with ErrorMessage, ErrorKind).
	UpdateState
	// UpdateAgent is an agent stream event (tool calls, lifecycle, ...): Stream
	// names the stream and Data holds its raw data object.
	UpdateAgent
)

// String implements fmt.Stringer.
func (k UpdateKind) String() string {
	switch k {
	case UpdateText:
		return "text"
	case UpdateState:
		return "state"
	case UpdateAgent:
		return "agent"
	}
	return fmt.Sprintf("UpdateKind(%d)", int(k))
}

// Update is one streamed event of a run, already filtered to the run's runId and
// session key.
type Update struct {
	Kind         UpdateKind
	Seq          int64
	Text         string
	Replace      bool
	State        string
	Phase        string
	StopReason   string
	ErrorMessage string
	ErrorKind    string
	Stream       string
	Data         json.RawMessage
}

// eventPayload is the union of the chat and agent event fields a run uses.
// The cumulative `message` of chat deltas is deliberately not decoded.
type eventPayload struct {
	RunID        string          `json:"runId"`
	SessionKey   string          `json:"sessionKey"`
	Seq          int64           `json:"seq"`
	State        string          `json:"state"`
	DeltaText    string          `json:"deltaText"`
	Replace      bool            `json:"replace"`
	Phase        string          `json:"phase"`
	StopReason   string          `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	ErrorKind    string          `json:"errorKind"`
	Stream       string          `json:"stream"`
	Data         json.RawMessage `json:"data"`
	IsHeartbeat  bool            `json:"isHeartbeat"`
}

// agentResponse is the accepted or final payload of an agent call.
type agentResponse struct {
	RunID      string `json:"runId"`
	Status     string `json:"status"`
	SessionKey string `json:"sessionKey"`
	Summary    string `json:"summary"`
	StopReason string `json:"stopReason"`
	Result     *struct {
		Payloads []Payload       `json:"payloads"`
		Meta     json.RawMessage `json:"meta"`
	} `json:"result"`
}

// Payload is one reply payload of a finished run.
type Payload struct {
	Text     string `json:"text"`
	MediaURL string `json:"mediaUrl,omitempty"`
}

// AgentResult is the outcome of a run.
type AgentResult struct {
	// RunID and SessionKey identify the run (SessionKey in canonical form).
	RunID      string
	SessionKey string
	// Status is the gateway's final status: "ok", "error" or "timeout"; empty
	// when the run ended without a final response (connection lost).
	Status string
	// Summary is the gateway's summary ("completed", "aborted", "failed" or an
	// error message).
	Summary string
	// StopReason is set for runs that did not complete normally.
	StopReason string
	// Text is the answer: the final payload texts joined by blank lines, or the
	// streamed text when the gateway sent no payloads. Heartbeat
	// acknowledgements are removed.
	Text string
	// Payloads are the final reply payloads (heartbeat-only ones removed).
	Payloads []Payload
	// StreamedText is the text assembled from this run's chat deltas.
	StreamedText string
	// Meta is the gateway's raw result.meta (durations, agentMeta, usage hints).
	Meta json.RawMessage
	// FilteredEvents counts events that named this run but were dropped because
	// their session key did not match or they were heartbeat events.
	FilteredEvents int
	// DroppedUpdates counts updates discarded because nobody consumed them.
	DroppedUpdates int
}

// AgentRun is a run started by Client.Agent. Consume its updates with Updates
// (one consumer) and its outcome with Wait.
type AgentRun struct {
	c       *Client // for Abort only
	log     *slog.Logger
	agentID string

	accepted   chan struct{}
	acceptOnce sync.Once
	done       chan struct{}
	notify     chan struct{}

	mu         sync.Mutex
	runID      string
	sessionKey string
	queue      []Update
	filter     textFilter
	text       strings.Builder
	final      *outcome // the final response, once read
	finished   bool
	result     *AgentResult
	err        error
	filtered   int
	dropped    int
}

// outcome is a run's result and error before they are published.
type outcome struct {
	res *AgentResult
	err error
}

var _ stream = (*AgentRun)(nil)

func newAgentRun(c *Client, p agentParams) *AgentRun {
	return &AgentRun{
		c:          c,
		log:        c.log,
		agentID:    p.AgentID,
		accepted:   make(chan struct{}),
		done:       make(chan struct{}),
		notify:     make(chan struct{}, 1),
		runID:      p.IdempotencyKey,
		sessionKey: CanonicalSessionKey(p.AgentID, p.SessionKey),
	}
}

// RunID returns the gateway's run id (the idempotency key).
func (r *AgentRun) RunID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runID
}

// SessionKey returns the run's session key in canonical form.
func (r *AgentRun) SessionKey() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessionKey
}

// Done is closed when the run has finished (or the connection ended).
func (r *AgentRun) Done() <-chan struct{} { return r.done }

// Updates yields the run's updates in arrival order until the run has finished
// and every update was yielded, or ctx ends. Use one consumer per run.
func (r *AgentRun) Updates(ctx context.Context) iter.Seq[Update] {
	return func(yield func(Update) bool) {
		for {
			r.mu.Lock()
			batch := r.queue
			r.queue = nil
			finished := r.finished
			r.mu.Unlock()
			for i, u := range batch {
				if !yield(u) {
					r.mu.Lock()
					r.queue = append(batch[i+1:], r.queue...)
					r.mu.Unlock()
					return
				}
			}
			if len(batch) > 0 {
				continue
			}
			if finished {
				return
			}
			select {
			case <-r.notify:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Wait blocks until the run has finished and returns its result. The error is
// nil only for status "ok". Otherwise: an *Error when the gateway reported one;
// errdefs.ErrTimeout for status "timeout"; ErrRunFailed for status "error";
// ErrClosed when the connection ended first (the result then holds the text
// streamed so far); the context's error when ctx ends first (the run goes on).
func (r *AgentRun) Wait(ctx context.Context) (*AgentResult, error) {
	select {
	case <-r.done:
		return r.result, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("gateway agent run %s: %w", r.RunID(), ctx.Err())
	}
}

// Abort asks the gateway to abort this run (chat.abort). It reports whether the
// gateway confirmed the abort. Errors are those of Client.Abort.
func (r *AgentRun) Abort(ctx context.Context) (bool, error) {
	return r.c.Abort(ctx, r.SessionKey(), r.RunID())
}

// event takes a chat or agent event whose runId is the run's (reader goroutine).
func (r *AgentRun) event(kind string, payload json.RawMessage) {
	var ev eventPayload
	if err := json.Unmarshal(payload, &ev); err != nil {
		r.log.Debug("gateway event with undecodable payload dropped", "event", kind, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final != nil || r.finished {
		return
	}
	if ev.RunID != r.runID || ev.IsHeartbeat || !sameSessionKey(r.agentID, ev.SessionKey, r.sessionKey) {
		r.filtered++
		return
	}
	if kind == eventAgent {
		r.pushLocked(Update{Kind: UpdateAgent, Seq: ev.Seq, Stream: ev.Stream, Data: ev.Data})
		return
	}
	switch ev.State {
	case "delta":
		if ev.Replace {
			r.filter.reset()
			had := r.text.Len() > 0
			t := r.filter.push(ev.DeltaText)
			r.text.Reset()
			r.text.WriteString(t)
			if t != "" || had {
				r.pushLocked(Update{Kind: UpdateText, Seq: ev.Seq, Text: t, Replace: true})
			}
			return
		}
		if t := r.filter.push(ev.DeltaText); t != "" {
			r.text.WriteString(t)
			r.pushLocked(Update{Kind: UpdateText, Seq: ev.Seq, Text: t})
		}
	case "":
		r.filtered++
	default:
		if ev.State != "status" {
			r.flushTextLocked(ev.Seq)
		}
		r.pushLocked(Update{
			Kind: UpdateState, Seq: ev.Seq, State: ev.State, Phase: ev.Phase,
			StopReason: ev.StopReason, ErrorMessage: ev.ErrorMessage, ErrorKind: ev.ErrorKind,
		})
	}
}

func (r *AgentRun) flushTextLocked(seq int64) {
	if t := r.filter.flush(); t != "" {
		r.text.WriteString(t)
		r.pushLocked(Update{Kind: UpdateText, Seq: seq, Text: t})
	}
}

func (r *AgentRun) pushLocked(u Update) {
	if len(r.queue) >= maxQueuedUpdates {
		r.dropped++
		return
	}
	r.queue = append(r.queue, u)
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// response takes the accepted or the final response of the agent call (reader
// goroutine). The final outcome is kept until end publishes it.
func (r *AgentRun) response(resp response) (string, bool) {
	var p agentResponse
	var decodeErr error
	if len(resp.payload) > 0 {
		decodeErr = json.Unmarshal(resp.payload, &p)
	}
	if resp.ok && decodeErr == nil && p.Status == "accepted" {
		id := r.adopt(p.RunID, p.SessionKey)
		r.acceptOnce.Do(func() { close(r.accepted) })
		return id, true
	}

	r.mu.Lock()
	res := &AgentResult{
		RunID:      r.runID,
		SessionKey: r.sessionKey,
		Status:     p.Status,
		Summary:    p.Summary,
		StopReason: p.StopReason,
	}
	r.mu.Unlock()
	if p.Result != nil {
		res.Meta = p.Result.Meta
		var texts []string
		for _, pl := range p.Result.Payloads {
			pl.Text = stripHeartbeat(pl.Text)
			if pl.Text == "" && pl.MediaURL == "" {
				continue
			}
			res.Payloads = append(res.Payloads, pl)
			if pl.Text != "" {
				texts = append(texts, pl.Text)
			}
		}
		res.Text = strings.Join(texts, "\n\n")
	}

	var err error
	switch {
	case !resp.ok:
		// With no status in the payload the run was rejected outright (bad
		// params, missing scope) and Agent returns the error itself.
		err = newError("agent", resp.err)
	case decodeErr != nil:
		err = fmt.Errorf("gateway agent run %s: %w: final payload: %v", res.RunID, ErrMalformedFrame, decodeErr)
	case p.Status == "ok":
	case p.Status == "timeout":
		err = fmt.Errorf("gateway agent run %s: %w (%s)", res.RunID, errdefs.ErrTimeout, p.Summary)
	case p.Status == "error":
		err = fmt.Errorf("gateway agent run %s: %w: %s", res.RunID, ErrRunFailed, p.Summary)
	default:
		err = fmt.Errorf("gateway agent run %s: %w: unexpected status %q", res.RunID, ErrRunFailed, p.Status)
	}
	r.mu.Lock()
	r.final = &outcome{res: res, err: err}
	r.mu.Unlock()
	return "", false
}

// adopt takes the gateway's run id and canonical session key from the accepted
// response: the gateway is the authority on which session the run is in. It
// returns the run id.
func (r *AgentRun) adopt(runID, sessionKey string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if runID != "" {
		r.runID = runID
	}
	if sk := strings.ToLower(strings.TrimSpace(sessionKey)); sk != "" && sk != r.sessionKey {
		r.log.Warn("gateway resolved the session key differently; following the gateway",
			"requested", r.sessionKey, "resolved", sk)
		r.sessionKey = sk
	}
	return r.runID
}

// end publishes the outcome: the final response when one was read (even if the
// connection ended right after), else the connection's end.
func (r *AgentRun) end(cause error) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	var o outcome
	if r.final != nil {
		o = *r.final
	} else {
		if cause == nil {
			cause = ErrClosed // not reached: the transport ends a stream without a final response only with an error
		}
		o = outcome{
			res: &AgentResult{RunID: r.runID, SessionKey: r.sessionKey},
			err: fmt.Errorf("gateway agent run %s: %w", r.runID, cause),
		}
	}
	r.flushTextLocked(0)
	o.res.StreamedText = r.text.String()
	if o.res.Text == "" && len(o.res.Payloads) == 0 {
		o.res.Text = stripHeartbeat(o.res.StreamedText)
	}
	o.res.FilteredEvents = r.filtered
	o.res.DroppedUpdates = r.dropped
	r.finished = true
	r.result, r.err = o.res, o.err
	r.mu.Unlock()
	close(r.done)
	select {
	case r.notify <- struct{}{}:
	default:
	}
}
