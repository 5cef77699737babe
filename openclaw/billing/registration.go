package billing

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxyconf"
)

// Registration is one run registered with a Router. Its token attributes calls to
// the run until Stop.
type Registration struct {
	r        *Router
	run      Run
	policy   *proxyconf.Policy
	token    string
	fallback bool

	mu          sync.Mutex
	records     []port.AuditRecord
	refusedKept int
	calls       int   // forwarded calls, for Budget.MaxCalls
	tokens      int64 // reported usage, for Budget.MaxTokens
	inflight    int
	stopping    bool
	idle        chan struct{} // closed when stopping and no call is in flight
	stopOnce    sync.Once
}

// RunID is the run's id.
func (g *Registration) RunID() string { return g.run.RunID }

// Attempt is the run's attempt number.
func (g *Registration) Attempt() int { return g.run.Attempt }

// Token is the run's secret token. Whoever holds it can bill calls to the run while
// it is registered: hand it only to the gateway, and never log it.
func (g *Registration) Token() string { return g.token }

// BaseURL is the OpenAI-compatible base URL that attributes calls to this run, for
// a provider entry's baseUrl: routerURL (how the gateway reaches the router, e.g.
// "http://127.0.0.1:4100") followed by /r/<token>/v1.
func (g *Registration) BaseURL(routerURL string) string {
	return strings.TrimSuffix(routerURL, "/") + tokenPathPrefix + g.token + "/v1"
}

// Audit returns a copy of the records of the run's calls completed so far, in
// completion order. Safe to call at any time, also after Stop. A call is recorded
// when its handler ends, which may be just after its client read the last byte;
// Stop waits for calls in flight, so its records are complete.
func (g *Registration) Audit() []port.AuditRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]port.AuditRecord(nil), g.records...)
}

// Stop revokes the run's token at once (later calls with it are unattributed),
// waits until the calls in flight finish or ctx ends, and returns the run's audit
// records. It is idempotent. When ctx ends first, the records so far are returned
// with an error wrapping ctx's error; calls still in flight are recorded when they
// end and appear in later Audit results.
func (g *Registration) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	g.stopOnce.Do(func() {
		g.r.forget(g)
		g.mu.Lock()
		g.stopping = true
		if g.inflight == 0 {
			close(g.idle)
		}
		g.mu.Unlock()
	})
	select {
	case <-g.idle:
		return g.Audit(), nil
	case <-ctx.Done():
		return g.Audit(), opErr("Stop", g.run.RunID, fmt.Errorf("calls still in flight: %w", ctx.Err()))
	}
}

// tryEnter counts a call in flight, unless the registration is being stopped.
func (g *Registration) tryEnter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return false
	}
	g.inflight++
	return true
}

// leave stores a finished call's record and wakes Stop when it was the last.
func (g *Registration) leave(rec port.AuditRecord, forwarded bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if forwarded || g.refusedKept < maxRefusedRecords {
		if !forwarded {
			g.refusedKept++
		}
		g.records = append(g.records, rec)
	}
	if g.stopping && g.inflight == 0 {
		close(g.idle)
	}
}

// reserve takes one call from the budget, or says why it cannot.
func (g *Registration) reserve() (reason, msg string) {
	b := g.run.Budget
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case b.MaxCalls > 0 && g.calls >= b.MaxCalls:
		return "budget_exceeded: max_calls", fmt.Sprintf("LLM call budget exceeded: this run may make %d calls and has used them all", b.MaxCalls)
	case b.MaxTokens > 0 && g.tokens >= b.MaxTokens:
		return "budget_exceeded: max_tokens", fmt.Sprintf("LLM token budget exceeded: this run may use %d tokens and has used %d", b.MaxTokens, g.tokens)
	}
	g.calls++
	return "", ""
}

// addTokens charges reported usage to the run's token budget.
func (g *Registration) addTokens(n int64) {
	g.mu.Lock()
	g.tokens += n
	g.mu.Unlock()
}
