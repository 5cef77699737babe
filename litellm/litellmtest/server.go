// Package litellmtest provides a fake LiteLLM proxy for tests, in the spirit of
// net/http/httptest: NewServer starts it on a loopback port, Close stops it.
//
// The fake follows the parts of LiteLLM's documented API that this module uses:
//
//   - master-key auth (Authorization: Bearer, x-litellm-api-key, api-key, x-api-key);
//     errors in LiteLLM's {"error":{"message","type","param","code"}} shape with code a
//     string, and FastAPI's {"detail":...} shape where LiteLLM produces it (query
//     validation, readiness).
//   - POST /v1/chat/completions and /chat/completions, plain and streamed (SSE with an
//     optional usage chunk and a final "data: [DONE]"); replies are scriptable with
//     WithReply, and the default reply echoes the marker found in the last user message.
//   - the response headers x-litellm-call-id (a UUID, distinct from the body's
//     "chatcmpl-" id) and x-litellm-model-id; x-litellm-response-cost on non-streamed
//     responses (a stream's cost is only known after its headers are sent).
//   - attribution: x-litellm-customer-id, then x-litellm-end-user-id, then the body's
//     "user" set the row's end_user; x-litellm-spend-logs-metadata (JSON) replaces the
//     body's metadata.spend_logs_metadata and is silently ignored when it is not JSON.
//   - spend rows, written after a batch-write delay (WithBatchWriteDelay) like LiteLLM's
//     proxy_batch_write_at, served by GET /spend/logs/v2 (paginated, total capped at
//     10,000) and the legacy GET /spend/logs.
//   - /v1/models, /model/info, /health/liveliness, /health/readiness, /customer/info.
//   - virtual keys: POST /key/generate (master key only) answers as LiteLLM's
//     GenerateKeyResponse, and the key is then checked as LiteLLM checks it: expiry,
//     allowed_routes (exact paths, "*" patterns, route group names; HTTP 403),
//     models (401 key_model_access_denied), max_budget (400 budget_exceeded, against
//     the key's spend rows); POST /key/delete revokes. Spend logs, customer info and
//     key management need the master key.
//
// Faults can be injected at run time (FailNext, MalformNext, SetLatency,
// DropStreamAfter, ErrorStreamAfter, IgnoreEndUserFilter, SetUnhealthy), and many
// synthetic spend rows can be preloaded quickly (Synthesize) for benchmarks.
//
// Every request is recorded (Requests) so a test can assert on what the upstream saw.
package litellmtest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultMasterKey is the master key of a server created without WithMasterKey.
const DefaultMasterKey = "sk-litellmtest-master"

// Model is one model the fake serves.
type Model struct {
	// Name is the public model name clients send ("model_name" in LiteLLM's config).
	Name string
	// Upstream is the provider model ("litellm_params.model"), stored as the spend
	// row's model. Empty means Name.
	Upstream string
	// Provider is the LiteLLM provider ("openai", "anthropic", ...); also owned_by.
	Provider string
	// ID is the deployment id returned in x-litellm-model-id. Empty means a stable
	// hash of Name.
	ID string
	// MaxInputTokens, MaxOutputTokens describe the model in /model/info.
	MaxInputTokens, MaxOutputTokens int
	// InputCostPerToken and OutputCostPerToken price a call in USD.
	InputCostPerToken, OutputCostPerToken float64
	// Vision and Reasoning are /model/info's supports_vision and supports_reasoning.
	Vision, Reasoning bool
}

// DefaultModels are served by a server created without WithModels.
var DefaultModels = []Model{
	{Name: "gpt-4o-mini", Upstream: "gpt-4o-mini-2024-07-18", Provider: "openai", MaxInputTokens: 128000, MaxOutputTokens: 16384, InputCostPerToken: 0.15e-6, OutputCostPerToken: 0.6e-6},
	{Name: "claude-haiku", Upstream: "anthropic/claude-3-5-haiku-20241022", Provider: "anthropic", MaxInputTokens: 200000, MaxOutputTokens: 8192, InputCostPerToken: 0.8e-6, OutputCostPerToken: 4e-6},
}

// ChatRequest is what a reply function sees of a chat completion request.
type ChatRequest struct {
	Model    string
	Messages []Message
	Stream   bool
	// EndUser is the attributed end user (after header precedence).
	EndUser string
	// Header is the request's header.
	Header http.Header
}

// Message is one chat message; non-text content parts are flattened to their text.
type Message struct {
	Role    string
	Content string
}

// Reply is a scripted chat completion.
type Reply struct {
	// Content is the assistant's text.
	Content string
	// Chunks, if set, are the streamed deltas (their concatenation should equal
	// Content); otherwise Content is split after each space.
	Chunks []string
	// PromptTokens and CompletionTokens override the fake's deterministic counts.
	PromptTokens, CompletionTokens int
}

// ReplyFunc scripts the server's chat completions.
type ReplyFunc func(ChatRequest) Reply

// DefaultReply echoes the marker in the last user message: the text after "MARKER:"
// up to the next space, as "ECHO:<marker>"; without a marker it answers "ok".
func DefaultReply(req ChatRequest) Reply {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "user" {
			continue
		}
		if _, rest, ok := strings.Cut(m.Content, "MARKER:"); ok {
			marker, _, _ := strings.Cut(rest, " ")
			return Reply{Content: "ECHO:" + marker}
		}
		break
	}
	return Reply{Content: "ok"}
}

// Option configures a Server.
type Option func(*config) error

type config struct {
	masterKey   string
	models      []Model
	reply       ReplyFunc
	chunkDelay  time.Duration
	batchDelay  time.Duration
	now         func() time.Time
	zulu        bool
	version     string
	keepHeaders bool
	trailers    http.Header
	hints       http.Header
	maxUsage    bool
}

// WithMasterKey sets the master key (default DefaultMasterKey).
func WithMasterKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return errors.New("litellmtest: empty master key")
		}
		c.masterKey = key
		return nil
	}
}

// WithModels replaces the served models.
func WithModels(models ...Model) Option {
	return func(c *config) error {
		if len(models) == 0 {
			return errors.New("litellmtest: no models")
		}
		seen := map[string]bool{}
		for _, m := range models {
			if m.Name == "" || seen[m.Name] {
				return fmt.Errorf("litellmtest: model name %q empty or repeated", m.Name)
			}
			seen[m.Name] = true
		}
		c.models = append([]Model(nil), models...)
		return nil
	}
}

// WithReply scripts the chat completions (default DefaultReply).
func WithReply(f ReplyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("litellmtest: nil reply func")
		}
		c.reply = f
		return nil
	}
}

// WithChunkDelay waits d before each streamed chunk, so a test can watch chunks
// arrive one by one.
func WithChunkDelay(d time.Duration) Option {
	return delay(d, "chunk delay", func(c *config) { c.chunkDelay = d })
}

// WithBatchWriteDelay makes spend rows visible only d after their call ended, like
// LiteLLM's proxy_batch_write_at (10 s by default there, 0 here).
func WithBatchWriteDelay(d time.Duration) Option {
	return delay(d, "batch write delay", func(c *config) { c.batchDelay = d })
}

// delay is an Option that applies set, refusing a negative d (what names it).
func delay(d time.Duration, what string, set func(*config)) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("litellmtest: negative " + what)
		}
		set(c)
		return nil
	}
}

// WithClock sets the server's clock (default time.Now). Row timestamps and the
// batch-write delay use it.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("litellmtest: nil clock")
		}
		c.now = now
		return nil
	}
}

// WithZuluTimestamps writes row timestamps as "...Z" instead of Python's
// isoformat "+00:00" (both occur in LiteLLM deployments).
func WithZuluTimestamps() Option {
	return func(c *config) error { c.zulu = true; return nil }
}

// WithResponseTrailers makes every answer end with the trailers h (announced
// in a Trailer header before the body), as a hostile or misconfigured upstream
// might: a proxy must not pass them to the agent.
func WithResponseTrailers(h http.Header) Option {
	return func(c *config) error {
		for k := range h {
			if http.CanonicalHeaderKey(k) != k || k == "" {
				return fmt.Errorf("litellmtest: trailer name %q is not canonical", k)
			}
		}
		c.trailers = h.Clone()
		return nil
	}
}

// WithEarlyHints makes every answer start with a 103 Early Hints response
// carrying h, as a hostile upstream might: informational responses carry
// headers too, and a proxy must not pass them to the agent.
func WithEarlyHints(h http.Header) Option {
	return func(c *config) error {
		c.hints = h.Clone()
		return nil
	}
}

// noLength drops Content-Length so the answer is chunked and can carry trailers.
type noLength struct{ http.ResponseWriter }

func (w noLength) WriteHeader(code int) {
	w.ResponseWriter.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w noLength) Write(b []byte) (int, error) {
	w.ResponseWriter.Header().Del("Content-Length")
	return w.ResponseWriter.Write(b)
}

func (w noLength) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// WithMaxUsage makes every chat completion report the most tokens its request
// allows: one prompt token per byte of the body as received, and each of its n
// choices at the smallest output cap the body names (max_tokens,
// max_completion_tokens), or MaxUsageUncapped without one. A token budget
// tested against it is tested against the worst case, not an estimate.
func WithMaxUsage() Option {
	return func(c *config) error { c.maxUsage = true; return nil }
}

// SharedKeyHeaders are the response headers the fake sends on every answer, as
// LiteLLM does (docs.litellm.ai/docs/proxy/response_headers): the rate limits of
// the key it was called with (x-ratelimit-*: with a shared key, every tenant's
// use), the provider's headers it relays with the llm_provider- prefix (the
// provider's organisation and its account's limits), and its headers about the key
// and the deployment. Each value holds "shared-key-canary", so a test can find any
// of them wherever it surfaces. None may reach a sandbox.
var SharedKeyHeaders = http.Header{
	"X-Ratelimit-Remaining-Requests":                {"9998-shared-key-canary"},
	"X-Ratelimit-Remaining-Tokens":                  {"99000-shared-key-canary"},
	"X-Ratelimit-Limit-Requests":                    {"10000-shared-key-canary"},
	"X-Ratelimit-Limit-Tokens":                      {"100000-shared-key-canary"},
	"X-Ratelimit-Reset-Requests":                    {"6ms-shared-key-canary"},
	"X-Ratelimit-Reset-Tokens":                      {"60ms-shared-key-canary"},
	"Llm_provider-Openai-Organization":              {"org-shared-key-canary"},
	"Llm_provider-X-Ratelimit-Remaining-Tokens":     {"12345-shared-key-canary"},
	"Llm_provider-Anthropic-Ratelimit-Tokens-Limit": {"400000-shared-key-canary"},
	"X-Litellm-Key-Spend":                           {"1234.5-shared-key-canary"},
	"X-Litellm-Key-Max-Budget":                      {"5000-shared-key-canary"},
	"X-Litellm-Model-Api-Base":                      {"http://10.0.0.7:8000/v1-shared-key-canary"},
}

// SharedKeyCanary is in every value of SharedKeyHeaders.
const SharedKeyCanary = "shared-key-canary"

// Server is a running fake LiteLLM.
type Server struct {
	// URL is the base URL, e.g. "http://127.0.0.1:41234", once serving.
	URL string

	cfg     config
	handler http.Handler
	models  map[string]Model

	mu       sync.Mutex
	reqs     []RecordedRequest
	store    rowStore
	faults   []*fault
	latency  time.Duration
	dropAt   int // next stream: drop after this many chunks (-1 none)
	errAt    int // next stream: error after this many chunks (-1 none)
	ignoreEU bool
	unhealth string
	keys     map[string]*virtualKey // by HashKey of the secret (/key/generate)

	srv      *http.Server
	closeOne sync.Once
}

// RecordedRequest is one request as the fake received it.
type RecordedRequest struct {
	Time     time.Time
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// Trailer holds the request's trailers (headers sent after a chunked
	// body), nil when there were none.
	Trailer http.Header
}

// Query parses the request's query string.
func (r RecordedRequest) Query() url.Values {
	q, _ := url.ParseQuery(r.RawQuery)
	return q
}

// NewUnstartedServer returns a fake that is not yet serving (use Serve or Handler), like
// httptest.NewUnstartedServer. Errors come from
// invalid options.
func NewUnstartedServer(opts ...Option) (*Server, error) {
	cfg := config{masterKey: DefaultMasterKey, models: DefaultModels, reply: DefaultReply, now: time.Now, version: "1.75.0"}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, models: map[string]Model{}, dropAt: -1, errAt: -1}
	for _, m := range cfg.models {
		if m.Upstream == "" {
			m.Upstream = m.Name
		}
		if m.Provider == "" {
			m.Provider = "openai"
		}
		if m.ID == "" {
			sum := sha256.Sum256([]byte("deployment/" + m.Name))
			m.ID = hex.EncodeToString(sum[:])
		}
		s.models[m.Name] = m
	}
	s.handler = s.routes()
	// LiteLLM answers with the shared key's rate limits and the provider's own
	// headers (relayed as llm_provider-*) on every call: a proxy must keep them
	// from the agent.
	inner := s.handler
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range SharedKeyHeaders {
			w.Header()[k] = v
		}
		inner.ServeHTTP(w, r)
	})
	if hints := cfg.hints; len(hints) > 0 {
		inner := s.handler
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range hints {
				w.Header()[k] = v
			}
			w.WriteHeader(http.StatusEarlyHints)
			for k := range hints {
				w.Header().Del(k)
			}
			inner.ServeHTTP(w, r)
		})
	}
	if tr := cfg.trailers; len(tr) > 0 {
		inner := s.handler
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k := range tr {
				w.Header().Add("Trailer", k)
			}
			inner.ServeHTTP(noLength{w}, r) // trailers need a chunked body
			for k, v := range tr {
				w.Header()[k] = v
			}
		})
	}
	return s, nil
}

// NewServer starts a fake on a random loopback port. It panics if an option is
// invalid or no port can be had, like httptest.NewServer.
func NewServer(opts ...Option) *Server {
	s, err := NewUnstartedServer(opts...)
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("litellmtest: listen: %v", err))
	}
	srv, err := s.attach(l)
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(l) }()
	return s
}

// Serve serves on l until Close; it sets URL from l's address before it accepts
// connections and returns http.ErrServerClosed after Close.
func (s *Server) Serve(l net.Listener) error {
	srv, err := s.attach(l)
	if err != nil {
		return err
	}
	return srv.Serve(l)
}

func (s *Server) attach(l net.Listener) (*http.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil, errors.New("litellmtest: already serving")
	}
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + l.Addr().String()
	return s.srv, nil
}

// Handler returns the fake as an http.Handler (for httptest.NewServer or a custom
// listener).
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the server and closes open connections, streams included.
func (s *Server) Close() {
	s.closeOne.Do(func() {
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			_ = srv.Close()
		}
	})
}

// MasterKey returns the master key clients must present.
func (s *Server) MasterKey() string { return s.cfg.masterKey }

// Requests returns a copy of every request received so far, in arrival order.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedRequest(nil), s.reqs...)
}

// RequestCount counts the requests whose path equals path.
func (s *Server) RequestCount(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.reqs {
		if r.Path == path {
			n++
		}
	}
	return n
}

// ResetRequests forgets the recorded requests.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	s.reqs = nil
	s.mu.Unlock()
}

// HashKey returns how LiteLLM stores an API key in spend rows: the hex SHA-256 of
// the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// newUUID returns a random RFC 4122 version 4 UUID, as LiteLLM's call ids are.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (s *Server) now() time.Time { return s.cfg.now().UTC() }

// record keeps a copy of the request and restores its body for the handler.
func (s *Server) record(r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 32<<20))
		_ = r.Body.Close()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	s.reqs = append(s.reqs, RecordedRequest{
		Time: s.now(), Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body, Trailer: r.Trailer.Clone(),
	})
	s.mu.Unlock()
}
