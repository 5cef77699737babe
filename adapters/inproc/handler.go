package inproc

import (
	"net/http"
	"strings"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
)

// barePaths are OpenAI API paths that SDKs send without the /v1 prefix when their base
// URL has none. They (and their sub-paths) are forwarded as /v1/...; see the package doc.
var barePaths = []string{"/chat/completions", "/completions", "/embeddings", "/models", "/moderations", "/responses"}

// route is the engine's Route hook: the shared rule, plus the bare OpenAI paths
// forwarded under /v1.
func route(r *http.Request, p string) (string, *llmproxy.Refusal) {
	if llmproxy.CleanPath(p) {
		for _, b := range barePaths {
			if p == b || strings.HasPrefix(p, b+"/") {
				return "/v1" + p, nil
			}
		}
	}
	return llmproxy.ForwardPath(p)
}

// ServeHTTP serves /health and hands every other request to the run's engine: the
// socket a request arrived on is its run.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		llmproxy.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "run_id": p.spec.RunID})
		return
	}
	if !p.meter.Enter() {
		llmproxy.WriteError(w, http.StatusServiceUnavailable, "proxy_stopping", "the run's LLM proxy is stopping")
		return
	}
	p.engine.Forward(w, r, p.meter, r.URL.Path)
}
