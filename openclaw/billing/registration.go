package billing

import (
	"context"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Registration is one run registered with a Router. Its token attributes calls to
// the run until Stop.
type Registration struct {
	r        *Router
	run      Run
	policy   *proxypolicy.Policy
	token    string
	fallback bool

	// meter holds the run's budget, audit and calls in flight.
	meter *llmproxy.Meter
	stop  sync.Once
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
func (g *Registration) Audit() []port.AuditRecord { return g.meter.Audit() }

// Stop revokes the run's token at once (later calls with it are unattributed),
// waits until the calls in flight finish or ctx ends, and returns the run's audit
// records. It is idempotent. When ctx ends first, the records so far are returned
// with an error wrapping ctx's error; calls still in flight are recorded when they
// end and appear in later Audit results.
func (g *Registration) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	g.stop.Do(func() { g.r.forget(g) })
	recs, err := g.meter.Stop(ctx)
	if err != nil {
		return recs, opErr("Stop", g.run.RunID, err)
	}
	return recs, nil
}
