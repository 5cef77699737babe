package inprocproxy

import (
	"net/http"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/port"
)

// ServeHTTP serves /health and hands every other request to the run's engine: the
// socket a request arrived on is its run.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		llmproxy.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "run_id": p.spec.RunID})
		return
	}
	if r.URL.Path == port.AttestationPath {
		llmproxy.ServeAttestation(w, r, p.meter)
		return
	}
	if !p.meter.Enter() {
		llmproxy.WriteError(w, http.StatusServiceUnavailable, "proxy_stopping", "proxy_stopping: the run's LLM proxy is stopping")
		return
	}
	p.engine.Forward(w, r, p.meter, r.URL.Path)
}
