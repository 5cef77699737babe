package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// maxQueuedUpdates bounds the updates a run keeps for a consumer that does not
// read them; beyond it updates are counted and dropped (the final answer still
// comes complete from the gateway's final response).
const maxQueuedUpdates = 1 << 16

// AgentRequest is one agent turn. Only fields the gateway's closed `agent`
// schema allows are sent.
type AgentRequest struct {
	// Message is the user message (required).
	Message string
	// SessionKey names the session (required). Events are delivered to the run
	// only when they carry this key (canonicalised; see CanonicalSessionKey).
	SessionKey string
	// AgentID selects the agent (default: the gateway's default agent, "main").
	AgentID string
	// IdempotencyKey deduplicates retries; the gateway uses it as the run id.
	// Generated when empty.
	IdempotencyKey string
	// Model overrides the model for this turn ("provider/model"), if set.
	Model string
	// Timeout is the gateway-side run timeout, sent in whole seconds (rounded
	// up); 0 leaves the gateway's default.
	Timeout time.Duration
	// ExtraSystemPrompt is appended to the agent's system prompt, if set.
	ExtraSystemPrompt string
}

// agentParams is the wire form of AgentRequest.
type agentParams struct {
	Message           string `json:"message"`
	IdempotencyKey    string `json:"idempotencyKey"`
	AgentID           string `json:"agentId,omitempty"`
	SessionKey        string `json:"sessionKey,omitempty"`
	Model             string `json:"model,omitempty"`
	Timeout           int64  `json:"timeout,omitempty"`
	ExtraSystemPrompt string `json:"extraSystemPrompt,omitempty"`
}

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

// eventPayload is the union of the chat and agent event fields the client uses.
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
	c       *Client
	reqID   string
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
	finished   bool
	result     *AgentResult
	err        error
	filtered   int
	dropped    int
}

// Agent starts an agent turn and returns once the gateway has accepted it.
// ctx bounds the submission only; use Wait's context to bound the run, and
// Abort to stop it. A ctx that ends before the gateway accepted may still leave
// the run going on the gateway: abort it by session key and IdempotencyKey. Events of other runs and other sessions never reach the
// returned run: an event is delivered only if its runId matches and its
// sessionKey canonically equals the run's (events without either are dropped).
//
// Errors: port.ErrInvalidSpec for a bad request; *GatewayError when the gateway
// rejects the run; ErrClosed when the connection ends; the context's error.
func (c *Client) Agent(ctx context.Context, req AgentRequest) (*AgentRun, error) {
	p, err := req.params()
	if err != nil {
		return nil, err
	}
	r := &AgentRun{
		c:          c,
		reqID:      c.newID(),
		agentID:    p.AgentID,
		accepted:   make(chan struct{}),
		done:       make(chan struct{}),
		notify:     make(chan struct{}, 1),
		runID:      p.IdempotencyKey,
		sessionKey: CanonicalSessionKey(p.AgentID, p.SessionKey),
	}
	if err := c.register(r.reqID, &call{method: "agent", run: r}, r); err != nil {
		return nil, fmt.Errorf("gateway agent: %w", err)
	}
	if err := c.sendRequest(ctx, r.reqID, "agent", p); err != nil {
		c.unregister(r.reqID, r)
		return nil, err
	}
	select {
	case <-r.accepted:
		return r, nil
	case <-r.done:
		select {
		case <-r.accepted: // accepted, then ended at once: Wait reports how
			return r, nil
		default:
		}
		if r.err != nil && r.result.Status == "" {
			return nil, r.err // rejected (or the connection ended) before acceptance
		}
		return r, nil // finished without an accepted response (a deduplicated run)
	case <-ctx.Done():
		c.unregister(r.reqID, r)
		return nil, fmt.Errorf("gateway agent: waiting for acceptance: %w", ctx.Err())
	}
}

func (req AgentRequest) params() (agentParams, error) {
	p := agentParams{
		Message:           req.Message,
		IdempotencyKey:    strings.TrimSpace(req.IdempotencyKey),
		AgentID:           strings.TrimSpace(req.AgentID),
		SessionKey:        strings.TrimSpace(req.SessionKey),
		Model:             strings.TrimSpace(req.Model),
		ExtraSystemPrompt: req.ExtraSystemPrompt,
	}
	switch {
	case strings.TrimSpace(req.Message) == "":
		return p, port.Invalidf("agent message is empty")
	case p.SessionKey == "":
		return p, port.Invalidf("agent session key is required: events are filtered by it")
	case p.AgentID != "" && !ValidAgentID(p.AgentID):
		return p, port.Invalidf("agent id %q", req.AgentID)
	case req.Timeout < 0:
		return p, port.Invalidf("agent timeout %s is negative", req.Timeout)
	}
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = newUUID()
	}
	if req.Timeout > 0 {
		p.Timeout = int64((req.Timeout + time.Second - 1) / time.Second)
	}
	return p, nil
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
// nil only for status "ok". Otherwise: a *GatewayError when the gateway reported
// one; port.ErrTimeout for status "timeout"; ErrRunFailed for status "error";
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
// gateway confirmed the abort.
func (r *AgentRun) Abort(ctx context.Context) (bool, error) {
	return r.c.Abort(ctx, r.SessionKey(), r.RunID())
}

// onEvent takes a chat or agent event whose runId matched (reader goroutine).
func (r *AgentRun) onEvent(kind string, ev *eventPayload) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	if ev.IsHeartbeat || !sameSessionKey(r.agentID, ev.SessionKey, r.sessionKey) {
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

// onResponse takes the accepted or final response of the agent call (reader
// goroutine).
func (r *AgentRun) onResponse(resp response) {
	var p agentResponse
	var decodeErr error
	if len(resp.payload) > 0 {
		decodeErr = json.Unmarshal(resp.payload, &p)
	}
	if resp.ok && decodeErr == nil && p.Status == "accepted" {
		r.adopt(p.RunID, p.SessionKey)
		r.acceptOnce.Do(func() { close(r.accepted) })
		return
	}
	r.c.unregister(r.reqID, r)

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
		err = newGatewayError("agent", resp.err)
	case decodeErr != nil:
		err = fmt.Errorf("gateway agent run %s: %w: final payload: %v", res.RunID, ErrMalformedFrame, decodeErr)
	case p.Status == "ok":
	case p.Status == "timeout":
		err = fmt.Errorf("gateway agent run %s: %w (%s)", res.RunID, port.ErrTimeout, p.Summary)
	case p.Status == "error":
		err = fmt.Errorf("gateway agent run %s: %w: %s", res.RunID, ErrRunFailed, p.Summary)
	default:
		err = fmt.Errorf("gateway agent run %s: %w: unexpected status %q", res.RunID, ErrRunFailed, p.Status)
	}
	r.finish(res, err)
}

// adopt takes the gateway's run id and canonical session key from the accepted
// response: the gateway is the authority on which session the run is in.
func (r *AgentRun) adopt(runID, sessionKey string) {
	r.mu.Lock()
	old := r.runID
	if runID != "" && runID != old {
		r.runID = runID
	}
	if sk := strings.ToLower(strings.TrimSpace(sessionKey)); sk != "" && sk != r.sessionKey {
		r.c.log.Warn("gateway resolved the session key differently; following the gateway",
			"requested", r.sessionKey, "resolved", sk)
		r.sessionKey = sk
	}
	newID := r.runID
	r.mu.Unlock()
	if newID != old {
		r.c.mu.Lock()
		if r.c.runs[old] == r {
			delete(r.c.runs, old)
			r.c.runs[newID] = r
		}
		r.c.mu.Unlock()
	}
}

// finishClosed ends the run because the connection ended.
func (r *AgentRun) finishClosed(cause error) {
	r.mu.Lock()
	res := &AgentResult{RunID: r.runID, SessionKey: r.sessionKey}
	id := r.runID
	r.mu.Unlock()
	r.finish(res, fmt.Errorf("gateway agent run %s: %w", id, cause))
}

// finish records the outcome once.
func (r *AgentRun) finish(res *AgentResult, err error) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.flushTextLocked(0)
	res.StreamedText = r.text.String()
	if res.Text == "" && len(res.Payloads) == 0 {
		res.Text = stripHeartbeat(res.StreamedText)
	}
	res.FilteredEvents = r.filtered
	res.DroppedUpdates = r.dropped
	r.finished = true
	r.result, r.err = res, err
	r.mu.Unlock()
	close(r.done)
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Abort asks the gateway to abort the runs of a session (chat.abort), or only
// runID when it is not empty. It reports whether the gateway confirmed an abort.
func (c *Client) Abort(ctx context.Context, sessionKey, runID string) (bool, error) {
	sessionKey = strings.TrimSpace(sessionKey)
	if sessionKey == "" {
		return false, port.Invalidf("abort needs a session key")
	}
	params := struct {
		SessionKey string `json:"sessionKey"`
		RunID      string `json:"runId,omitempty"`
	}{sessionKey, strings.TrimSpace(runID)}
	raw, err := c.Request(ctx, "chat.abort", params)
	if err != nil {
		return false, err
	}
	var out struct {
		Aborted bool     `json:"aborted"`
		RunIDs  []string `json:"runIds"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return false, fmt.Errorf("gateway chat.abort: %w: %v", ErrMalformedFrame, err)
	}
	if !out.Aborted {
		return false, nil
	}
	if params.RunID == "" || out.RunIDs == nil {
		return true, nil
	}
	for _, id := range out.RunIDs {
		if id == params.RunID {
			return true, nil
		}
	}
	return false, nil
}

// WaitStatus is the answer of agent.wait.
type WaitStatus struct {
	// Status is "ok", "error", "timeout" or, while the run goes on, "pending"
	// (or whatever newer gateways report).
	Status string `json:"status"`
	// Error is the gateway's error text for failed runs.
	Error string `json:"error"`
	// StartedAt and EndedAt are Unix milliseconds (0 when unknown).
	StartedAt int64 `json:"startedAt"`
	EndedAt   int64 `json:"endedAt"`
}

// AgentWait asks the gateway to wait up to timeout for a run to finish
// (agent.wait). Useful for a run started by another connection; for runs of this
// client, AgentRun.Wait is cheaper. ctx should outlast timeout.
func (c *Client) AgentWait(ctx context.Context, runID string, timeout time.Duration) (*WaitStatus, error) {
	if strings.TrimSpace(runID) == "" || timeout < 0 {
		return nil, port.Invalidf("agent.wait needs a run id and a non-negative timeout")
	}
	params := struct {
		RunID     string `json:"runId"`
		TimeoutMs int64  `json:"timeoutMs"`
	}{strings.TrimSpace(runID), timeout.Milliseconds()}
	raw, err := c.Request(ctx, "agent.wait", params)
	if err != nil {
		return nil, err
	}
	var ws WaitStatus
	if err := json.Unmarshal(raw, &ws); err != nil {
		return nil, fmt.Errorf("gateway agent.wait: %w: %v", ErrMalformedFrame, err)
	}
	return &ws, nil
}

// SessionPatch is a change to a session's settings (sessions.patch). Exactly the
// fields set are sent; the gateway's schema is closed.
type SessionPatch struct {
	// Model selects the session's model ("provider/model" or an alias).
	Model string
	// ClearModel resets the session to the configured model.
	ClearModel bool
}

// SessionPatchResult is the gateway's answer to sessions.patch.
type SessionPatchResult struct {
	// Key is the session's canonical key.
	Key string
	// ModelProvider and Model are the model the session resolves to now.
	ModelProvider string
	Model         string
	// Raw is the whole response payload.
	Raw json.RawMessage
}

// SessionsPatch changes a session's settings, e.g. its model before a run.
func (c *Client) SessionsPatch(ctx context.Context, key string, patch SessionPatch) (*SessionPatchResult, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		return nil, port.Invalidf("sessions.patch needs a session key")
	}
	params := map[string]any{"key": key}
	switch {
	case patch.ClearModel && patch.Model != "":
		return nil, port.Invalidf("sessions.patch: both Model and ClearModel set")
	case patch.ClearModel:
		params["model"] = nil
	case strings.TrimSpace(patch.Model) != "":
		params["model"] = strings.TrimSpace(patch.Model)
	default:
		return nil, port.Invalidf("sessions.patch: nothing to change")
	}
	raw, err := c.Request(ctx, "sessions.patch", params)
	if err != nil {
		return nil, err
	}
	var out struct {
		Key      string `json:"key"`
		Resolved struct {
			ModelProvider string `json:"modelProvider"`
			Model         string `json:"model"`
		} `json:"resolved"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("gateway sessions.patch: %w: %v", ErrMalformedFrame, err)
	}
	return &SessionPatchResult{Key: out.Key, ModelProvider: out.Resolved.ModelProvider, Model: out.Resolved.Model, Raw: raw}, nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	h := randomHex(16)
	b := []byte(h)
	b[12] = '4'
	b[16] = "89ab"[int(b[16])%4]
	return string(b[0:8]) + "-" + string(b[8:12]) + "-" + string(b[12:16]) + "-" + string(b[16:20]) + "-" + string(b[20:32])
}
