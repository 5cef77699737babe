package litellmtest

import (
	"crypto/subtle"
	"net/http"
	"sort"
	"strings"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.authorize(w, r) {
				h(w, r)
			}
		}
	}
	// Management routes: the master key only (a virtual key passes its route check
	// only if its allowed_routes name the route, and is then refused as no admin).
	admin := func(h http.HandlerFunc) http.HandlerFunc {
		return authed(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(presentedKey(r)), []byte(s.cfg.masterKey)) != 1 {
				writeProxyError(w, http.StatusUnauthorized, "Authentication Error, Only proxy admin can be used to generate, delete, update info for new keys/users/teams. Route="+r.URL.Path+". Your role=unknown. Your user_id=unknown", "auth_error", "None")
				return
			}
			h(w, r)
		})
	}
	// The client routes answer with and without the /v1 prefix, as LiteLLM's do.
	for _, rt := range []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"POST", "/chat/completions", s.chat},
		{"GET", "/models", s.listModels},
		{"GET", "/models/{model...}", s.getModel},
		{"POST", "/completions", s.completions},
		{"POST", "/embeddings", s.embeddings},
		{"POST", "/responses", s.responses},
		{"POST", "/moderations", s.moderations},
		{"GET", "/model/info", s.modelInfo},
	} {
		for _, p := range []string{"/v1", ""} {
			mux.HandleFunc(rt.method+" "+p+rt.path, authed(rt.h))
		}
	}
	mux.HandleFunc("POST /v1/messages", authed(s.messages))
	mux.HandleFunc("GET /spend/logs/v2", admin(s.spendLogsV2))
	mux.HandleFunc("GET /spend/logs", admin(s.spendLogsLegacy))
	mux.HandleFunc("GET /customer/info", admin(s.customerInfo))
	mux.HandleFunc("GET /end_user/info", admin(s.customerInfo))
	mux.HandleFunc("POST /key/generate", admin(s.generateKey))
	mux.HandleFunc("POST /key/delete", admin(s.deleteKey))
	// LiteLLM's health probes are public.
	mux.HandleFunc("GET /health/liveliness", s.liveliness)
	mux.HandleFunc("GET /health/liveness", s.liveliness)
	mux.HandleFunc("GET /health/readiness", s.readiness)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "Not Found"})
	})

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		s.mu.Lock()
		lat := s.latency
		s.mu.Unlock()
		if !ctxsleep.Sleep(r.Context(), lat) {
			return
		}
		if f := s.takeFault(r.URL.Path); f != nil {
			f.write(w)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// presentedKey returns the key a client sent, in the headers LiteLLM reads.
func presentedKey(r *http.Request) string {
	if v := r.Header.Get("Authorization"); v != "" {
		if k, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
		return strings.TrimSpace(v)
	}
	for _, h := range []string{"x-litellm-api-key", "api-key", "x-api-key"} {
		if v := r.Header.Get(h); v != "" {
			return strings.TrimPrefix(strings.TrimSpace(v), "Bearer ")
		}
	}
	return ""
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	key := presentedKey(r)
	if key == "" {
		writeProxyError(w, http.StatusUnauthorized, "Authentication Error, No api key passed in.", "auth_error", "None")
		return false
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.masterKey)) == 1 {
		return true
	}
	s.mu.Lock()
	vk, ok := s.keys[HashKey(key)]
	var k virtualKey
	if ok {
		k = *vk
	}
	s.mu.Unlock()
	if ok {
		return s.checkVirtualKey(w, r, k)
	}
	shown := key
	if len(shown) > 4 {
		shown = "sk-..." + shown[len(shown)-4:]
	}
	writeProxyError(w, http.StatusUnauthorized,
		"Authentication Error, Invalid proxy server token passed. Received API Key = "+shown+", Key Hash (Token) ="+HashKey(key),
		"auth_error", "None")
	return false
}

// Models returns the served models with their defaults filled in (Upstream,
// Provider, deployment ID), in configuration order.
func (s *Server) Models() []Model { return s.sortedModels() }

func (s *Server) sortedModels() []Model {
	out := make([]Model, 0, len(s.models))
	for _, m := range s.cfg.models {
		out = append(out, s.models[m.Name])
	}
	return out
}

func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) {
	data := []map[string]any{}
	for _, m := range s.sortedModels() {
		data = append(data, map[string]any{"id": m.Name, "object": "model", "created": 1677610602, "owned_by": m.Provider})
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "object": "list"})
}

func (s *Server) modelInfo(w http.ResponseWriter, _ *http.Request) {
	data := []map[string]any{}
	for _, m := range s.sortedModels() {
		data = append(data, map[string]any{
			"model_name":     m.Name,
			"litellm_params": map[string]any{"model": m.Upstream},
			"model_info": map[string]any{
				"id": m.ID, "db_model": false, "key": m.Upstream, "mode": "chat",
				"max_tokens": m.MaxOutputTokens, "max_input_tokens": m.MaxInputTokens, "max_output_tokens": m.MaxOutputTokens,
				"input_cost_per_token": m.InputCostPerToken, "output_cost_per_token": m.OutputCostPerToken,
				"litellm_provider": m.Provider, "supports_function_calling": true,
				"supports_vision": m.Vision, "supports_reasoning": m.Reasoning,
			},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

func (s *Server) liveliness(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, "I'm alive!")
}

func (s *Server) readiness(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	msg := s.unhealth
	s.mu.Unlock()
	if msg != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"detail": "Service Unhealthy (" + msg + ")"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "connected", "db": "connected", "cache": nil, "litellm_version": s.cfg.version,
		"success_callbacks": []string{}, "use_aiohttp_transport": true,
		"last_updated": pyISO(s.now(), false),
	})
}

func (s *Server) customerInfo(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("end_user_id")
	if id == "" {
		writeValidationError(w, "missing", "end_user_id", "Field required", "", nil)
		return
	}
	s.mu.Lock()
	c, ok := s.store.customers[id]
	s.mu.Unlock()
	if !ok {
		writeProxyError(w, http.StatusNotFound, "End User Id="+id+" does not exist in db", "not_found", "end_user_id")
		return
	}
	// model_dump(exclude_none=True): null fields are left out.
	writeJSON(w, http.StatusOK, map[string]any{"user_id": id, "blocked": false, "spend": c.spend})
}

// Customers returns the end users the fake has seen (LiteLLM creates them as
// attributed requests arrive), sorted.
func (s *Server) Customers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.store.customers))
	for id := range s.store.customers {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
