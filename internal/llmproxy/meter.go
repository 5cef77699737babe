package llmproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Audit caps. A Meter keeps every record of a billable call (one forwarded on a
// route with a body: each may cost money, and Budget.MaxCalls bounds them), but
// only the first records of calls that cannot cost anything, so a flood of bad
// requests or of GET /v1/models cannot grow the host's memory without bound; past
// a cap such calls are counted (MeterStats).
const (
	// MaxRefusedRecords caps the records kept of refused calls.
	MaxRefusedRecords = 1000
	// MaxUnbilledRecords caps the records kept of forwarded calls on routes
	// without a body (GET /v1/models).
	MaxUnbilledRecords = 1000
	// MaxBodiesInFlight caps the request bodies of one run held in memory at once
	// (read, parsed and not yet sent upstream); more calls wait their turn, so a
	// run cannot make the host buffer many maximum-size bodies at the same time.
	MaxBodiesInFlight = 4
)

// MeterConfig is what a Meter needs to know about its run.
type MeterConfig struct {
	// RunID and Attempt go into every audit record.
	RunID   string
	Attempt int
	// Policy is the run's validated header policy: the key and the attribution.
	Policy *proxypolicy.Policy
	// Budget caps the run's forwarded calls and tokens; zero fields mean unlimited.
	Budget port.Budget
	// RequireAttestation refuses every call until the run's bridge attested an
	// isolation without violations (see port.Attestation).
	RequireAttestation bool
	// AttestKey, when set, is the run's attestation key (port.LLMSocket.AttestKey):
	// an attestation counts only when it carries it (bridgeapi.AttestKeyHeader). Set
	// it on every front whose runner can hand the key to the bridge: without one,
	// the first report counts, whoever sent it.
	AttestKey string
	// Logger receives the run's call logs (default: discard). It should already
	// carry the run id.
	Logger *slog.Logger
	// Restored is what an earlier life of the run used and recorded (a shared
	// daemon that restarted): its usage counts against the budget, its records
	// lead the audit.
	Restored Restored
	// OnRecord, if set, is called with every record the meter keeps, and the
	// run's usage after the call, before the call ends (before Stop can return
	// and before the handler returns): a durable front persists them there. ticket
	// is the call's admission (OnAdmit), "" for a call refused before it.
	OnRecord func(rec port.AuditRecord, used Usage, ticket string)
	// OnAdmit, if set, is called for every call about to be forwarded, once it was
	// counted against the budget: with the run's usage, the tokens reserved for it
	// and what is known of it (rec). A durable front persists them there and
	// returns the call's ticket, so that a call a crash cuts short still counts (and
	// is charged its reservation) after a restart. An error refuses the call: it is
	// not forwarded unaccounted for.
	OnAdmit func(used Usage, reserved int64, rec port.AuditRecord) (ticket string, err error)
	// OnSettle, if set, is called when an admitted call ends without a record kept
	// (past the audit caps), with the run's usage: the front settles its ticket.
	OnSettle func(used Usage, ticket string)
	// OnAttest, if set, persists the run's attestation before it is recorded;
	// an error records nothing (the bridge may send it again).
	OnAttest func(a *port.Attestation) error
	// Trace is the run's span, the parent of every call's span; an invalid one
	// gives each call a trace of its own.
	Trace trace.SpanContext
}

// Usage is what a run has taken from its budget.
type Usage struct {
	Calls  int   `json:"calls"`
	Tokens int64 `json:"tokens"`
}

// Restored is a run's state carried over from an earlier Meter.
type Restored struct {
	Used    Usage
	Records []port.AuditRecord
	// Attestation is the attestation the run's bridge sent to the earlier life,
	// nil if none: it stays the run's, and no other is taken.
	Attestation *port.Attestation
}

// MeterStats counts what a Meter saw but did not keep one by one.
type MeterStats struct {
	// Records is the number of audit records kept.
	Records int
	// Forwarded counts calls forwarded upstream; Refused counts calls refused.
	Forwarded, Refused int
	// RefusedDropped counts refused calls past MaxRefusedRecords, not kept.
	RefusedDropped int
	// UnbilledDropped counts forwarded calls past MaxUnbilledRecords, not kept.
	UnbilledDropped int
	// Tokens is the usage charged to the run's token budget so far.
	Tokens int64
}

// Meter is one run's bookkeeping: its budget, its audit records and its calls in
// flight. Every front keeps one Meter per run and hands it to Engine.Forward; the
// budget and audit rules therefore exist once. A Meter is safe for concurrent use.
type Meter struct {
	cfg MeterConfig
	log *slog.Logger

	mu          sync.Mutex
	records     []port.AuditRecord
	refusedKept int
	unbilled    int // records kept of forwarded calls that cannot be billed
	stats       MeterStats
	calls       int   // calls admitted, for Budget.MaxCalls
	tokens      int64 // usage charged, for Budget.MaxTokens
	reserved    int64 // tokens held by calls in flight beyond what they were charged
	inflight    int
	stopping    bool
	idle        chan struct{} // closed once stopping with nothing in flight
	bodies      chan struct{} // MaxBodiesInFlight slots
	attestation *port.Attestation
}

// NewMeter returns the meter of one run. It does not validate cfg: the fronts
// validate their specs (proxypolicy.NewPolicy) before making one.
func NewMeter(cfg MeterConfig) *Meter {
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	m := &Meter{cfg: cfg, log: l, idle: make(chan struct{}), bodies: make(chan struct{}, MaxBodiesInFlight)}
	m.calls, m.tokens = cfg.Restored.Used.Calls, cfg.Restored.Used.Tokens
	m.records = append(m.records, cfg.Restored.Records...)
	m.attestation = cfg.Restored.Attestation
	for _, r := range cfg.Restored.Records {
		switch {
		case r.Blocked != "":
			m.refusedKept++
			m.stats.Refused++
		case r.Method == "GET":
			m.unbilled++
			m.stats.Forwarded++
		default:
			m.stats.Forwarded++
		}
	}
	return m
}

// RunID is the run the meter accounts for.
func (m *Meter) RunID() string { return m.cfg.RunID }

// Used is what the run has taken from its budget so far.
func (m *Meter) Used() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Usage{Calls: m.calls, Tokens: m.tokens}
}

// Attempt is the run's attempt number.
func (m *Meter) Attempt() int { return m.cfg.Attempt }

// Enter counts a call in flight, unless the meter is stopping. A front calls it
// when it has found the request's run, before Engine.Forward (which ends the call
// whatever happens).
func (m *Meter) Enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return false
	}
	m.inflight++
	return true
}

// leave stores a finished call's record (within the caps) and wakes Stop when
// it was the last. billable says the call may cost money; ticket is its admission
// ("" if it had none).
func (m *Meter) leave(rec port.AuditRecord, forwarded, billable bool, ticket string) {
	m.mu.Lock()
	n := len(m.records)
	switch {
	case forwarded && billable:
		m.stats.Forwarded++
		m.records = append(m.records, rec)
	case forwarded:
		m.stats.Forwarded++
		m.keepCapped(rec, &m.unbilled, MaxUnbilledRecords, &m.stats.UnbilledDropped)
	default:
		m.stats.Refused++
		m.keepCapped(rec, &m.refusedKept, MaxRefusedRecords, &m.stats.RefusedDropped)
	}
	kept, used := len(m.records) > n, Usage{Calls: m.calls, Tokens: m.tokens}
	m.mu.Unlock()
	// Still in flight while the hook runs, so Stop waits for it.
	switch {
	case kept && m.cfg.OnRecord != nil:
		m.cfg.OnRecord(rec, used, ticket)
	case !kept && ticket != "" && m.cfg.OnSettle != nil:
		m.cfg.OnSettle(used, ticket)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight--
	if m.stopping && m.inflight == 0 {
		close(m.idle)
	}
}

// keepCapped keeps rec while *kept is under limit (counting it), else counts it in
// *dropped: a run's unbillable and refused calls are kept up to a cap each.
func (m *Meter) keepCapped(rec port.AuditRecord, kept *int, limit int, dropped *int) {
	if *kept < limit {
		*kept++
		m.records = append(m.records, rec)
	} else {
		*dropped++
	}
}

// reservation is what reserve took for a call.
type reservation struct {
	tokens int64 // reserved from the token budget
	outCap int64 // the output cap the call is forwarded with (token budget only)
}

// reserve takes one call from the budget and, under a token budget, reserves
// the most the call can cost (need: its prompt bound plus choices times its
// output cap). The output cap is the one the body names (asked; else
// defaultOut), lowered to what the budget has left after the prompt bound, and
// never below 1: the engine writes it into the body. A call is admitted while
// the budget minus what is charged and reserved is positive, so whatever the
// concurrency, everything charged stays within the budget plus one call's
// excess: the prompt bound plus its choices, minus what was left when it was
// admitted. A call whose body refers to media (need.media) reserves at least
// all that is left, so it runs alone. It returns the reservation, or the
// refusal.
func (m *Meter) reserve(budgeted bool, need tokenNeed, asked, defaultOut int64) (reservation, *Refusal) {
	b := m.cfg.Budget
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case b.MaxCalls > 0 && m.calls >= b.MaxCalls:
		return reservation{}, budgetRefusal("budget_exceeded: max_calls", fmt.Sprintf("LLM call budget exceeded: this run may make %d calls and has used them all", b.MaxCalls))
	case b.MaxTokens > 0 && m.tokens+m.reserved >= b.MaxTokens:
		msg := fmt.Sprintf("LLM token budget exceeded: this run may use %d tokens and has used %d", b.MaxTokens, m.tokens)
		if m.reserved > 0 {
			msg += fmt.Sprintf(", with %d more reserved by calls in flight", m.reserved)
		}
		return reservation{}, budgetRefusal("budget_exceeded: max_tokens", msg)
	}
	m.calls++
	if b.MaxTokens <= 0 || !budgeted {
		return reservation{}, nil
	}
	left := b.MaxTokens - m.tokens - m.reserved
	r := reservation{tokens: need.prompt}
	if need.output {
		choices := max(need.choices, 1)
		out := asked
		if out <= 0 {
			out = defaultOut
		}
		r.outCap = max(1, min(out, (left-need.prompt)/choices))
		r.tokens += choices * r.outCap
	}
	if need.media {
		r.tokens = max(r.tokens, left)
	}
	m.reserved += r.tokens
	return r, nil
}

// admit hands a call the budget took (reserve) to the front's OnAdmit before it is
// forwarded, and notes its ticket. A call it cannot admit is given back and refused:
// the front could not account for it. The admissions of a run's calls may reach the
// front out of order: each carries the run's usage counted with it, and a durable
// front keeps the largest, so the calls counted durably are never fewer than the
// calls forwarded.
func (m *Meter) admit(c *Call) *Refusal {
	if m.cfg.OnAdmit == nil {
		return nil
	}
	m.mu.Lock()
	used := Usage{Calls: m.calls, Tokens: m.tokens}
	m.mu.Unlock()
	ticket, err := m.cfg.OnAdmit(used, c.reserved, c.rec)
	if err != nil {
		m.unreserve(c)
		m.log.Error("llmproxy: the call could not be recorded durably; refused", "err", err)
		return &Refusal{Status: http.StatusServiceUnavailable, Blocked: "accounting_unavailable", Type: "internal_error",
			Message: "accounting: the call could not be recorded; try again later"}
	}
	c.ticket = ticket
	return nil
}

// unreserve gives back what reserve took for c, for a call refused after it.
func (m *Meter) unreserve(c *Call) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls--
	m.reserved -= c.reserved
	c.reserved = 0
}

func budgetRefusal(blocked, msg string) *Refusal {
	return &Refusal{Status: 429, Blocked: blocked, Type: "budget_exceeded", Message: msg}
}

// charge charges n tokens of c's reported usage, releasing as much of its
// reservation.
func (m *Meter) charge(c *Call, n int64) {
	if n <= 0 { // usage only grows: a smaller report later refunds nothing
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens += n
	c.charged += n
	if rel := min(max(n, 0), c.reserved); rel > 0 {
		c.reserved -= rel
		m.reserved -= rel
	}
}

// settle ends c's reservation. A successful call whose response reported no
// usage is charged its reservation, so that hiding usage cannot dodge the budget.
func (m *Meter) settle(c *Call, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok && c.charged == 0 {
		m.tokens += c.reserved
	}
	m.reserved -= c.reserved
	c.reserved = 0
}

// Audit returns a copy of the records of the calls completed so far, in completion
// order. Safe at any time, also after Stop.
func (m *Meter) Audit() []port.AuditRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]port.AuditRecord(nil), m.records...)
}

// Stats returns the meter's counters.
func (m *Meter) Stats() MeterStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Records, s.Tokens = len(m.records), m.tokens
	return s
}

// Stop makes Enter fail from now on and waits until the calls in flight end or
// ctx does. It returns the audit records either way; the error wraps ctx's when
// calls were still in flight (they are recorded when they end, and show in later
// Audit results). Stop is idempotent.
func (m *Meter) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	m.mu.Lock()
	if !m.stopping {
		m.stopping = true
		if m.inflight == 0 {
			close(m.idle)
		}
	}
	m.mu.Unlock()
	select {
	case <-m.idle:
		return m.Audit(), nil
	case <-ctx.Done():
		return m.Audit(), fmt.Errorf("calls still in flight: %w", ctx.Err())
	}
}
