package litellmtest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// virtualKey is a key made by /key/generate, as LiteLLM's verification token
// stores it.
type virtualKey struct {
	alias         string
	models        []string
	maxBudget     *float64
	allowedRoutes []string
	metadata      map[string]any
	userID        string
	expires       time.Time // zero: never
	spend         float64
}

// Route groups a key's allowed_routes may name, as LiteLLM's LiteLLMRoutes members
// (the routes of each that this fake serves, and the admin-ish ones that make
// llm_api_routes wider than its name says).
var routeGroups = map[string][]string{
	"openai_routes": {
		"/chat/completions", "/v1/chat/completions", "/completions", "/v1/completions",
		"/embeddings", "/v1/embeddings", "/responses", "/v1/responses", "/moderations", "/v1/moderations",
		"/models", "/v1/models", "/v1/files", "/files", "/v1/batches", "/batches", "/v1/vector_stores", "/vector_stores",
		"/fine_tuning/jobs", "/v1/fine_tuning/jobs",
	},
	"anthropic_routes": {"/v1/messages", "/v1/messages/count_tokens"},
	"mcp_routes":       {"/mcp", "/mcp/", "/v1/mcp/server"},
	"agent_routes":     {"/v1/agents", "/agents"},
	"info_routes":      {"/key/info", "/model/info", "/v1/model/info", "/health", "/models", "/v1/models"},
}

func init() {
	var llm []string
	for _, g := range []string{"openai_routes", "anthropic_routes", "mcp_routes", "agent_routes"} {
		llm = append(llm, routeGroups[g]...)
	}
	routeGroups["llm_api_routes"] = llm
}

// routeAllowed follows LiteLLM's RouteChecks.is_virtual_key_allowed_to_call_route:
// no list allows everything; else an exact path, a group name, or a pattern ending
// in "*".
func routeAllowed(allowed []string, route string) bool {
	if len(allowed) == 0 {
		return true
	}
	for _, a := range allowed {
		if a == route {
			return true
		}
		for _, g := range routeGroups[a] {
			if g == route {
				return true
			}
		}
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(route, p) {
			return true
		}
	}
	return false
}

// pyList formats a list as Python prints it, as LiteLLM's messages do.
func pyList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// checkVirtualKey applies a virtual key's limits to a request, in LiteLLM's order:
// expiry, route, model, budget. It reports whether the request may go on.
func (s *Server) checkVirtualKey(w http.ResponseWriter, r *http.Request, k virtualKey) bool {
	route := r.URL.Path
	if !k.expires.IsZero() && !s.now().Before(k.expires) {
		writeProxyError(w, http.StatusUnauthorized, fmt.Sprintf("Authentication Error - Expired Key. Key Expiry time %s and current time %s", pyISO(k.expires, false), pyISO(s.now(), false)), "expired_key", "None")
		return false
	}
	if !routeAllowed(k.allowedRoutes, route) {
		writeProxyError(w, http.StatusForbidden, fmt.Sprintf("Authentication Error, Virtual key is not allowed to call this route. Only allowed to call routes: %s. Tried to call route: %s", pyList(k.allowedRoutes), route), "auth_error", "None")
		return false
	}
	if len(k.models) > 0 && r.Method == http.MethodPost && r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		var body struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(b, &body) == nil && body.Model != "" && !contains(k.models, body.Model) {
			writeProxyError(w, http.StatusUnauthorized, fmt.Sprintf("Authentication Error, key not allowed to access model. This key can only access models=%s. Tried to access %s", pyList(k.models), body.Model), "key_model_access_denied", "model")
			return false
		}
	}
	if k.maxBudget != nil && k.spend >= *k.maxBudget {
		writeProxyError(w, http.StatusBadRequest, fmt.Sprintf("Budget has been exceeded! Current cost: %s, Max budget: %s", pyFloat(k.spend), pyFloat(*k.maxBudget)), "budget_exceeded", "None")
		return false
	}
	return true
}

func contains(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// LiteLLM's duration_in_seconds: a number and a unit.
var durationRe = regexp.MustCompile(`^(\d+)(s|m|h|d|w|mo)$`)

func parseDuration(v string) (time.Duration, bool) {
	m := durationRe.FindStringSubmatch(v)
	if m == nil {
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour, "mo": 30 * 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, true
}

// generateKey serves POST /key/generate for the master key.
func (s *Server) generateKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		KeyAlias      *string        `json:"key_alias"`
		Duration      *string        `json:"duration"`
		Models        []string       `json:"models"`
		MaxBudget     *float64       `json:"max_budget"`
		AllowedRoutes []string       `json:"allowed_routes"`
		Metadata      map[string]any `json:"metadata"`
		UserID        *string        `json:"user_id"`
		Key           *string        `json:"key"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{map[string]any{"type": "json_invalid", "loc": []any{"body"}, "msg": "JSON decode error", "input": map[string]any{}}}})
		return
	}
	k := virtualKey{models: req.Models, maxBudget: req.MaxBudget, allowedRoutes: req.AllowedRoutes, metadata: req.Metadata}
	if k.models == nil {
		k.models = []string{}
	}
	if k.allowedRoutes == nil {
		k.allowedRoutes = []string{}
	}
	if k.metadata == nil {
		k.metadata = map[string]any{}
	}
	if req.KeyAlias != nil {
		k.alias = *req.KeyAlias
	}
	if req.UserID != nil {
		k.userID = *req.UserID
	}
	var expires any
	if req.Duration != nil && *req.Duration != "" {
		d, ok := parseDuration(*req.Duration)
		if !ok {
			writeProxyError(w, http.StatusBadRequest, "Invalid duration format: "+*req.Duration, "bad_request_error", "None")
			return
		}
		k.expires = s.now().Add(d)
		expires = pyISO(k.expires, false)
	}
	secret := "sk-" + randomToken()
	if req.Key != nil && *req.Key != "" {
		if !strings.HasPrefix(*req.Key, "sk-") {
			writeProxyError(w, http.StatusBadRequest, "Invalid key format. LiteLLM Virtual Key must start with 'sk-'. Received: "+*req.Key, "bad_request_error", "None")
			return
		}
		secret = *req.Key
	}
	hash := HashKey(secret)
	s.mu.Lock()
	if s.keys == nil {
		s.keys = map[string]*virtualKey{}
	}
	if _, dup := s.keys[hash]; dup {
		s.mu.Unlock()
		writeProxyError(w, http.StatusBadRequest, "Unique key constraint failed", "bad_request_error", "None")
		return
	}
	s.keys[hash] = &k
	s.mu.Unlock()
	alias := any(nil)
	if req.KeyAlias != nil {
		alias = k.alias
	}
	user := any(nil)
	if req.UserID != nil {
		user = k.userID
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"key": secret, "key_name": "sk-..." + secret[len(secret)-4:], "token": hash, "token_id": hash,
		"key_alias": alias, "expires": expires, "models": k.models, "max_budget": k.maxBudget,
		"allowed_routes": k.allowedRoutes, "metadata": k.metadata, "user_id": user, "spend": 0.0,
		"duration": req.Duration, "team_id": nil, "budget_duration": nil,
	})
}

// deleteKey serves POST /key/delete: {"keys": [...]} (the keys or their hashes).
func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Keys []string `json:"keys"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Keys) == 0 {
		writeProxyError(w, http.StatusBadRequest, "No keys provided", "bad_request_error", "None")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var hashes []string
	for _, k := range req.Keys {
		h := k
		if strings.HasPrefix(k, "sk-") {
			h = HashKey(k)
		}
		if _, ok := s.keys[h]; !ok {
			writeProxyError(w, http.StatusNotFound, "Failed to delete all keys. Keys passed in="+pyList(req.Keys)+", Keys deleted=[]", "not_found", "None")
			return
		}
		hashes = append(hashes, h)
	}
	for _, h := range hashes {
		delete(s.keys, h)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted_keys": req.Keys})
}

// VirtualKey is what the fake holds for a key made with /key/generate.
type VirtualKey struct {
	Alias         string
	Models        []string
	MaxBudget     *float64
	AllowedRoutes []string
	Spend         float64
	Expires       time.Time
}

// VirtualKeys returns the keys made with /key/generate and not deleted, by hash
// (HashKey of the secret).
func (s *Server) VirtualKeys() map[string]VirtualKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]VirtualKey{}
	for h, k := range s.keys {
		out[h] = VirtualKey{Alias: k.alias, Models: append([]string(nil), k.models...), MaxBudget: k.maxBudget,
			AllowedRoutes: append([]string(nil), k.allowedRoutes...), Spend: k.spend, Expires: k.expires}
	}
	return out
}

// randomToken is 22 URL-safe characters, as LiteLLM's secrets.token_urlsafe(16).
func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
