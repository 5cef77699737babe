package billing

import (
	"net/http"
	"net/http/httputil"
)

// ServeHTTP serves /health, attributes the call to its run by its token (refusing
// calls it cannot attribute) and hands it to the engine with the run's meter.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/health" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		writeJSONStatus(w)
		return
	}
	reg, rest, fallback := r.lookup(req)
	if reg == nil {
		r.refuseUnattributed(w, req)
		return
	}
	if fallback {
		r.log.Warn("billing: call without a live run token billed to the fallback account", "fallback_run_id", reg.run.RunID)
	}
	r.engine.Forward(w, req, reg.meter, rest)
}

// rewrite is the engine's Rewrite hook: the run token never goes upstream.
func rewrite(pr *httputil.ProxyRequest) { pr.Out.Header.Del(TokenHeader) }

func writeJSONStatus(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}
