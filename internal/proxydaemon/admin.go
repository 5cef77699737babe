package proxydaemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/portconv"
	"github.com/agentsandbox/sandbox/port"
)

// DefaultGrace is how long a deregistration waits for calls in flight.
const DefaultGrace = 5 * time.Second

// AdminHandler is the admin API (see api/proxydapi for its shape).
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathHealth, s.health)
	mux.HandleFunc("POST "+api.PathRuns, s.register)
	mux.HandleFunc("GET "+api.PathRuns, s.list)
	mux.HandleFunc("DELETE "+api.PathRuns+"/{id}", s.deregister)
	mux.HandleFunc("GET "+api.PathRuns+"/{id}/audit", s.audit)
	mux.HandleFunc("GET "+api.PathRuns+"/{id}/audit/stream", s.auditStream)
	mux.HandleFunc("GET "+api.PathRuns+"/{id}/attestation", s.attestation)
	mux.HandleFunc("GET "+api.PathRuns+"/{id}/egress", s.egressRecords)
	return mux
}

// ServeAdmin serves the admin API on ln (a unix socket listener) to peers
// running as the daemon's uid or one of Config.AdminUIDs, until ln is closed.
func (s *Server) ServeAdmin(ln net.Listener) error {
	srv := &http.Server{Handler: s.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10}
	pl := &peerListener{Listener: ln, allowed: append([]int{os.Geteuid()}, s.cfg.AdminUIDs...), log: s.log}
	return srv.Serve(pl)
}

// ListenAdmin makes the admin socket at path (mode 0600, replacing a stale one).
func ListenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// The umask narrows the socket before anyone can connect.
	old := umask(0o177)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// writeErr answers err through the API's one error table.
func writeErr(w http.ResponseWriter, err error) {
	status, body := api.ToAPIError(err)
	llmproxy.WriteJSON(w, status, body)
}

// DecodeRegister decodes a registration request strictly: one JSON object of
// known fields, at most api.MaxRequestBytes, nothing after it. Errors wrap
// port.ErrInvalidSpec.
func DecodeRegister(r io.Reader) (api.RegisterRequest, error) {
	var req api.RegisterRequest
	dec := json.NewDecoder(io.LimitReader(r, api.MaxRequestBytes+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, port.Invalidf("request body: %v", clip(err.Error()))
	}
	if dec.InputOffset() > api.MaxRequestBytes {
		return req, port.Invalidf("request body over %d bytes", api.MaxRequestBytes)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, port.Invalidf("request body: data after the JSON object")
	}
	return req, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	llmproxy.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Runs: s.Runs()})
}

func (s *Server) register(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/json" {
		writeErr(w, port.Invalidf("content type %q, want application/json", clip(ct)))
		return
	}
	rr, err := DecodeRegister(req.Body)
	if err != nil {
		writeErr(w, err)
		return
	}
	out, err := s.Register(req.Context(), rr)
	if err != nil {
		writeErr(w, err)
		return
	}
	llmproxy.WriteJSON(w, http.StatusCreated, out)
}

// Register registers a run and starts serving its socket (or, for a network
// sandbox, starts answering its source IP on the network listener).
func (s *Server) Register(ctx context.Context, rr api.RegisterRequest) (api.Registered, error) {
	if s.cfg.UpstreamKey != nil {
		if rr.APIKey != "" {
			return api.Registered{}, port.Invalidf("the daemon holds the upstream key: a registration must not carry one")
		}
		k, err := s.cfg.UpstreamKey()
		if err != nil {
			// The error names the file, never its content.
			return api.Registered{}, fmt.Errorf("%w: proxyd: the daemon's upstream key: %v", port.ErrUnavailable, err)
		}
		rr.APIKey = k
	}
	if _, err := validate(rr); err != nil {
		return api.Registered{}, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return api.Registered{}, errClosed
	}
	if rr.Network != nil {
		return s.registerNetwork(ctx, rr)
	}
	name, err := s.dirName(rr.RunID)
	if err != nil {
		return api.Registered{}, err
	}
	var eg *egress.Policy
	if rr.Egress != nil {
		if eg, err = compileEgress(rr.Egress); err != nil {
			return api.Registered{}, err
		}
	}
	// Credential values stay in memory: never sealed into the registry file.
	spec := storedSpec{Req: withoutCredentials(rr), TokenExpiry: s.tokenExpiry(rr.RunID, rr.Attempt), AttestKey: bridgeapi.NewAttestKey()}
	sealed, err := s.sealSpec(spec)
	if err != nil {
		return api.Registered{}, err
	}
	g := identity.Registration{RunID: rr.RunID, Attempt: rr.Attempt, Name: name, Socket: name, Spec: sealed}
	r, err := s.newRun(g, spec, eg, llmproxy.Restored{})
	if err != nil {
		return api.Registered{}, err
	}
	res, err := s.reg.Register(ctx, g, "")
	if err != nil {
		return api.Registered{}, err
	}
	r.id = res.ID
	if err := r.listen(); err != nil {
		_ = s.reg.Remove(context.WithoutCancel(ctx), res.ID)
		_ = os.RemoveAll(r.dir)
		return api.Registered{}, fmt.Errorf("%w: %w", port.ErrInternal, err)
	}
	s.mu.Lock()
	s.runs[res.ID] = r
	s.mu.Unlock()
	s.log.Debug("proxyd: run registered", "run_id", rr.RunID, "id", res.ID, "dir", r.dir)
	return api.Registered{ID: res.ID, RunID: rr.RunID, Attempt: rr.Attempt, SocketDir: r.dir, SocketPath: r.sock,
		Token: r.token, TokenExpiry: time.Unix(spec.TokenExpiry, 0).UTC(), Egress: r.egress != nil, AttestKey: spec.AttestKey}, nil
}

// registerNetwork registers a sandbox found by its source IP.
func (s *Server) registerNetwork(ctx context.Context, rr api.RegisterRequest) (api.Registered, error) {
	n := *rr.Network
	if n.SessionToken == "" || n.StartTime.IsZero() {
		return api.Registered{}, port.Invalidf("a network registration needs an ip, a start time and a session token")
	}
	ip, err := netip.ParseAddr(n.IP)
	if err != nil {
		return api.Registered{}, port.Invalidf("network ip %q is not an IP address", clip(n.IP))
	}
	if len(n.SessionToken) > 256 || strings.ContainsAny(n.SessionToken, ":\x00\r\n") {
		return api.Registered{}, port.Invalidf("session token is over 256 bytes or holds ':' or control characters")
	}
	token := n.SessionToken
	// The session token is kept as a hash only: not in the sealed spec.
	stored := rr
	sn := n
	sn.SessionToken = ""
	stored.Network = &sn
	spec := storedSpec{Req: stored, AttestKey: bridgeapi.NewAttestKey()}
	sealed, err := s.sealSpec(spec)
	if err != nil {
		return api.Registered{}, err
	}
	g := identity.Registration{RunID: rr.RunID, Attempt: rr.Attempt, Name: n.Name, StartTime: n.StartTime, IP: ip.Unmap(), Spec: sealed}
	r, err := s.newRun(g, spec, nil, llmproxy.Restored{})
	if err != nil {
		return api.Registered{}, err
	}
	res, err := s.reg.Register(ctx, g, token)
	if err != nil {
		return api.Registered{}, err
	}
	r.id = res.ID
	s.mu.Lock()
	s.runs[res.ID] = r
	s.mu.Unlock()
	if res.Restarted != "" {
		s.log.Info("proxyd: network sandbox restarted; the old registration is left to expire", "run_id", rr.RunID, "id", res.ID, "old", res.Restarted)
	}
	return api.Registered{ID: res.ID, RunID: rr.RunID, Attempt: rr.Attempt, Restarted: res.Restarted, AttestKey: spec.AttestKey}, nil
}

// dirName is <run id, shortened to fit>-<random hex>.
func (s *Server) dirName(runID string) (string, error) {
	var b [suffixLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	room := maxSocketPath - (len(s.cfg.SocketDir) + 1 + 1 + suffixLen + 1 + len(port.LLMSocketName))
	if len(runID) > room {
		runID = runID[:room]
	}
	return runID + "-" + hex.EncodeToString(b[:]), nil
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	out := []api.RunInfo{}
	for _, g := range s.reg.List() {
		if g.State != identity.Active {
			continue
		}
		ri := api.RunInfo{ID: g.ID, RunID: g.RunID, Attempt: g.Attempt,
			RegisteredAt: g.RegisteredAt, LastSeen: g.LastSeen, Calls: g.Calls, Tokens: g.Tokens}
		if g.Socket != "" {
			ri.SocketDir = filepath.Join(s.cfg.SocketDir, g.Socket)
		}
		if g.IP.IsValid() {
			ri.IP = g.IP.String()
		}
		out = append(out, ri)
	}
	llmproxy.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) deregister(w http.ResponseWriter, req *http.Request) {
	grace := DefaultGrace
	if v := req.URL.Query().Get("grace"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Hour {
			writeErr(w, port.Invalidf("grace %q is not a duration between 0 and 1h", clip(v)))
			return
		}
		grace = d
	}
	out, err := s.Deregister(req.Context(), req.PathValue("id"), grace)
	if err != nil {
		writeErr(w, err)
		return
	}
	llmproxy.WriteJSON(w, http.StatusOK, out)
}

// Deregister ends a run (calls in flight get grace) and returns its audit.
func (s *Server) Deregister(ctx context.Context, id string, grace time.Duration) (api.DeregisterResponse, error) {
	r := s.take(id)
	if r == nil {
		return api.DeregisterResponse{}, fmt.Errorf("run %q: %w", clip(id), port.ErrNotFound)
	}
	var out api.DeregisterResponse
	if err := r.stop(ctx, grace); err != nil {
		out.Error = err.Error()
	}
	out.Audit = portconv.WireAuditRecords(r.meter.Audit())
	out.Attestation = portconv.WireAttestation(r.meter.Attestation())
	out.Egress = portconv.WireEgressRecords(r.egressAudit())
	out.EgressSummary = portconv.WireEgressSummary(r.egressSummary())
	if err := s.reg.Remove(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, port.ErrNotFound) {
		s.log.Warn("proxyd: remove registration", "id", id, "err", err)
	}
	s.log.Debug("proxyd: run deregistered", "run_id", r.meter.RunID(), "id", id, "records", len(out.Audit))
	return out, nil
}

// pathRun returns the live run the request's path names, or answers 404 and
// returns nil.
func (s *Server) pathRun(w http.ResponseWriter, req *http.Request) *run {
	id := req.PathValue("id")
	r := s.lookup(id)
	if r == nil {
		writeErr(w, fmt.Errorf("run %q: %w", clip(id), port.ErrNotFound))
	}
	return r
}

func (s *Server) lookup(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

func afterParam(req *http.Request) (int64, error) {
	v := req.URL.Query().Get("after")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, port.Invalidf("after %q is not a non-negative integer", clip(v))
	}
	return n, nil
}

// auditArgs is the after parameter of an audit request for run id (found says
// whether it is registered); ok is false once the request was answered with an error.
func auditArgs(w http.ResponseWriter, req *http.Request, id string, found bool) (after int64, ok bool) {
	if !found {
		writeErr(w, fmt.Errorf("run %q: %w", clip(id), port.ErrNotFound))
		return 0, false
	}
	after, err := afterParam(req)
	if err != nil {
		writeErr(w, err)
		return 0, false
	}
	return after, true
}

func (s *Server) audit(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	_, found := s.reg.ByID(id)
	after, ok := auditArgs(w, req, id, found)
	if !ok {
		return
	}
	recs, next, err := s.reg.Audit(req.Context(), id, after)
	if err != nil {
		writeErr(w, err)
		return
	}
	if recs == nil {
		recs = []port.AuditRecord{}
	}
	llmproxy.WriteJSON(w, http.StatusOK, api.AuditPage{Records: portconv.WireAuditRecords(recs), Next: next})
}

// auditStream writes the run's records as they are stored, one JSON line each,
// until the run ends or the client leaves.
func (s *Server) auditStream(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	r := s.lookup(id)
	after, ok := auditArgs(w, req, id, r != nil)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(bw)
	for {
		r.mu.Lock()
		notify := r.notify
		r.mu.Unlock()
		es, next, err := s.reg.Entries(req.Context(), id, after)
		if err != nil {
			if req.Context().Err() == nil {
				s.log.Warn("proxyd: audit stream cut", "id", id, "err", err)
			}
			// Cut, not ended: a stream that ends says its run ended.
			panic(http.ErrAbortHandler)
		}
		for _, e := range es {
			if enc.Encode(api.AuditEntry{Seq: e.Seq, Record: portconv.WireAuditRecord(e.Record)}) != nil {
				return
			}
		}
		after = next
		if bw.Flush() != nil || rc.Flush() != nil {
			return
		}
		select {
		case <-notify:
		case <-r.done:
			return // the run ended: the stream ends
		case <-req.Context().Done():
			return
		case <-s.closing:
			// The daemon stops, the run does not: cut the stream, so that a follower
			// reconnects to the next daemon instead of taking it for the run's end.
			panic(http.ErrAbortHandler)
		}
	}
}

func (s *Server) attestation(w http.ResponseWriter, req *http.Request) {
	r := s.pathRun(w, req)
	if r == nil {
		return
	}
	llmproxy.WriteJSON(w, http.StatusOK, api.AttestationAnswer{Attestation: portconv.WireAttestation(r.meter.Attestation())})
}

// Validate checks a registration request as Register does, without side
// effects. Errors wrap port.ErrInvalidSpec.
func Validate(req api.RegisterRequest) (port.ProxySpec, error) { return validate(req) }

// tokenExpiry is a new registration's token expiry: TokenTTL from now, and
// later than any this daemon gave the same run id and attempt, so that the
// token of an earlier registration (its expiry) is never the new one's.
func (s *Server) tokenExpiry(runID string, attempt int) int64 {
	k := runID + "|" + strconv.Itoa(attempt)
	e := time.Now().Add(s.cfg.TokenTTL).Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastExpiry == nil {
		s.lastExpiry = map[string]int64{}
	}
	if last, ok := s.lastExpiry[k]; ok && e <= last {
		e = last + 1
	}
	s.lastExpiry[k] = e
	return e
}
