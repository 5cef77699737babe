package proxydaemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/portconv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
	"github.com/agentsandbox/sandbox/runtoken"
)

// storedSpec is what the registry keeps of a run, sealed (it holds the API key).
type storedSpec struct {
	Req         api.RegisterRequest `json:"req"`
	TokenExpiry int64               `json:"token_expiry"`
}

// run is one registered run served on its own socket.
type run struct {
	s      *Server
	id     string
	spec   storedSpec
	dir    string
	sock   string
	token  string
	log    *slog.Logger
	engine *llmproxy.Engine
	meter  *llmproxy.Meter
	lim    *rate.Limiter // nil: no rate limit
	slots  chan struct{} // nil: no stream cap
	uid    int           // -1: no peer check
	// network: found by source IP on the network listener; no socket, no token.
	network bool
	// egressPol is the run's egress policy; nil: no egress front.
	egressPol *egress.Policy

	mu       sync.Mutex
	ln       net.Listener
	egress   *egress.Front
	conns    map[*runConn]struct{}
	notify   chan struct{} // closed and replaced when a record is stored
	seq      int64         // records stored
	done     chan struct{} // closed when the run ends
	stopOnce sync.Once
	stopErr  error
}

type runKey struct{}

// newRun makes a run from its registration without touching the file system.
func (s *Server) newRun(g identity.Registration, spec storedSpec, eg *egress.Policy, restored llmproxy.Restored) (*run, error) {
	pspec, err := validate(spec.Req)
	if err != nil {
		return nil, err
	}
	policy, err := proxypolicy.NewPolicy(pspec)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(pspec.Upstream)
	e, err := s.engine(u)
	if err != nil {
		return nil, err
	}
	var tok, dir string
	if g.Socket != "" {
		if tok, err = runtoken.Mint(s.cfg.Keys.Current, pspec.RunID, pspec.Attempt, time.Unix(spec.TokenExpiry, 0)); err != nil {
			return nil, err
		}
		dir = filepath.Join(s.cfg.SocketDir, g.Socket)
	}
	r := &run{s: s, id: g.ID, spec: spec, dir: dir, sock: filepath.Join(dir, port.LLMSocketName), token: tok, network: g.Socket == "",
		log: s.log.With("run_id", pspec.RunID), engine: e, uid: -1, egressPol: eg,
		conns: map[*runConn]struct{}{}, notify: make(chan struct{}), done: make(chan struct{})}
	if spec.Req.SandboxUID != nil {
		r.uid = *spec.Req.SandboxUID
	}
	rl := s.cfg.Rate
	if spec.Req.Rate != nil {
		rl = *spec.Req.Rate
	}
	if rl.RPS > 0 {
		r.lim = rate.NewLimiter(rate.Limit(rl.RPS), max(rl.Burst, 1))
	}
	if rl.Streams > 0 {
		r.slots = make(chan struct{}, rl.Streams)
	}
	r.seq = int64(len(restored.Records))
	mc := llmproxy.MeterConfig{RunID: pspec.RunID, Attempt: pspec.Attempt, Policy: policy,
		Budget: pspec.Budget, RequireAttestation: pspec.RequireAttestation, Logger: r.log,
		Restored: restored, OnRecord: r.persist, OnAttest: r.persistAttestation}
	if pspec.Budget.MaxCalls > 0 {
		mc.OnAdmit = r.admit // only a call budget needs the count before the call
	}
	r.meter = llmproxy.NewMeter(mc)
	return r, nil
}

// admit counts a call against the run's budget durably before it is
// forwarded: a daemon killed while the call is in flight counts it after its
// restart (the upstream may bill it; reconciliation says what it cost).
func (r *run) admit(used llmproxy.Usage) error {
	return r.s.reg.AppendUsage(context.Background(), r.id, identity.Usage{Calls: used.Calls, Tokens: used.Tokens})
}

// persistAttestation commits the run's attestation before it counts, so a
// restarted daemon keeps it (and takes no other).
func (r *run) persistAttestation(a *port.Attestation) error {
	ok, err := r.s.reg.SetAttestation(context.Background(), r.id, a)
	if err == nil && !ok {
		return errors.New("the run already has a stored attestation")
	}
	return err
}

// persist stores a completed call's record and the run's usage before the call
// ends: a daemon killed after this loses nothing of the call.
func (r *run) persist(rec port.AuditRecord, used llmproxy.Usage) {
	if err := r.s.reg.AppendAudit(context.Background(), r.id, rec, identity.Usage{Calls: used.Calls, Tokens: used.Tokens}); err != nil {
		r.log.Error("proxyd: audit record not stored", "err", err)
	}
	r.mu.Lock()
	r.seq++
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
}

// listen makes (or re-makes) the run's directory, token file and socket, and
// serves it.
func (r *run) listen() error {
	if err := os.Mkdir(r.dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make run dir: %w", err)
	}
	if fi, err := os.Lstat(r.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("run dir %s is not a directory", r.dir)
	}
	if err := os.Chmod(r.dir, 0o711); err != nil {
		return err
	}
	// A socket file left by a killed daemon is stale: nobody listens on it.
	if err := os.Remove(r.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Least privilege: the token file and the socket belong to the sandbox's uid
	// (or, without one, to the daemon's alone), readable and connectable by
	// nobody else; the peer check below says the same to the kernel. A daemon
	// that may not give files away (not root) keeps them open to all and relies
	// on the peer check.
	tokenMode, sockMode, owner := os.FileMode(0o400), os.FileMode(0o600), r.uid
	if owner < 0 {
		owner = os.Geteuid()
	}
	tokPath := filepath.Join(r.dir, bridgeapi.TokenFile)
	if err := writeFileAtomic(tokPath, []byte(r.token), 0o600, owner, tokenMode); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on %s: %w", r.sock, err)
	}
	if err := os.Lchown(r.sock, owner, -1); err != nil {
		r.log.Warn("proxyd: the run's socket cannot be given to the sandbox's uid; it stays open to every uid the peer check allows", "uid", owner, "err", err)
		sockMode = 0o666
	}
	if err := os.Chmod(r.sock, sockMode); err != nil {
		ln.Close()
		return err
	}
	var l net.Listener = ln
	// Without a sandbox uid only the daemon's own uid may connect: a run must
	// name its sandbox's uid to be reachable from it.
	allowed := []int{os.Geteuid()}
	if r.uid >= 0 {
		allowed = append(allowed, r.uid)
	}
	l = &peerListener{Listener: l, allowed: allowed, log: r.log}
	l = &runListener{Listener: llmproxy.LimitListener(l, r.s.cfg.ConnsPerRun, r.s.conns), r: r}
	r.mu.Lock()
	r.ln = l
	r.mu.Unlock()
	go func() {
		if err := r.s.srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			r.log.Warn("proxyd: serve", "err", err)
		}
	}()
	if err := r.startEgress(); err != nil {
		r.closeListener()
		return err
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file made with mode,
// then gives it to owner with final (or, where it may not, leaves it 0644).
func writeFileAtomic(path string, b []byte, mode os.FileMode, owner int, final os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode) // O_EXCL: never through a planted link
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && f.Chown(owner, -1) != nil {
		final = 0o644 // not root: the owner cannot change, so the sandbox reads it as other
	}
	if err == nil {
		err = f.Chmod(final)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func (r *run) closeListener() {
	r.mu.Lock()
	ln := r.ln
	r.ln = nil
	r.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

func (r *run) cutConns() {
	r.mu.Lock()
	cs := make([]*runConn, 0, len(r.conns))
	for c := range r.conns {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// waitIdle waits (at most d) until no connection of the run is in the middle
// of an answer: after the last call's record, the server still writes the end
// of its chunked answer.
func (r *run) waitIdle(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		busy := false
		r.mu.Lock()
		for c := range r.conns {
			if http.ConnState(c.state.Load()) == http.StateActive {
				busy = true
				break
			}
		}
		r.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stop ends the run: no new connections, calls in flight get grace to end
// (then they are cut), files removed. It returns the audit.
func (r *run) stop(ctx context.Context, grace time.Duration) error {
	r.stopOnce.Do(func() {
		r.closeListener()
		gctx, cancel := context.WithTimeout(ctx, grace)
		r.stopEgress(gctx)
		_, err := r.meter.Stop(gctx)
		cancel()
		if err == nil {
			r.waitIdle(handlerGrace)
		}
		r.cutConns()
		if err != nil {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handlerGrace)
			if _, werr := r.meter.Stop(hctx); werr != nil {
				r.log.Error("proxyd: handlers did not finish after their connections were cut", "err", werr)
			}
			cancel()
			r.stopErr = fmt.Errorf("calls in flight were cut after the grace of %v", grace)
		}
		if r.dir != "" {
			if err := os.RemoveAll(r.dir); err != nil {
				r.log.Warn("proxyd: remove run dir", "err", err)
			}
		}
		close(r.done)
	})
	return r.stopErr
}

// runListener tags every connection with its run.
type runListener struct {
	net.Listener
	r *run
}

func (l *runListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &runConn{Conn: c, run: l.r}
	l.r.mu.Lock()
	l.r.conns[rc] = struct{}{}
	l.r.mu.Unlock()
	return rc, nil
}

type runConn struct {
	net.Conn
	run   *run
	once  sync.Once
	state atomic.Int32 // http.ConnState
}

func (c *runConn) Close() error {
	c.once.Do(func() {
		c.run.mu.Lock()
		delete(c.run.conns, c)
		c.run.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveRun serves a request on a run's socket: the socket names the run, the
// run token must agree, then the rate limits, then the engine.
func (s *Server) serveRun(w http.ResponseWriter, req *http.Request) {
	r, _ := req.Context().Value(runKey{}).(*run)
	if r == nil {
		s.serveNetwork(w, req)
		return
	}
	s.reg.Touch(r.id)
	s.serveFound(w, req, r, nil)
}

// serveNetwork serves a request on the network listener: its source IP names
// the run; an X-Sandbox-ID, if sent, must match the registration.
func (s *Server) serveNetwork(w http.ResponseWriter, req *http.Request) {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		llmproxy.WriteError(w, http.StatusForbidden, "permission_denied", "sandbox_id: unknown source")
		return
	}
	sid := req.Header.Get(api.HeaderSandboxID)
	req.Header.Del(api.HeaderSandboxID)
	g, err := s.reg.ByIP(ap.Addr(), sid)
	var r *run
	if g.ID != "" {
		r = s.lookup(g.ID)
	}
	if r == nil || !r.network {
		llmproxy.WriteError(w, http.StatusForbidden, "permission_denied", "sandbox_id: no sandbox is registered at this address")
		return
	}
	s.serveFound(w, req, r, err)
}

// serveFound serves a request of a run that was found; idErr is a failed
// identity check, refused and audited.
func (s *Server) serveFound(w http.ResponseWriter, req *http.Request, r *run, idErr error) {
	p := r.meter
	if req.URL.Path == "/health" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		llmproxy.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "run_id": p.RunID()})
		return
	}
	w = &chunkedWriter{ResponseWriter: w}
	tok := req.Header.Get(runtoken.Header)
	req.Header.Del(runtoken.Header)
	var terr error
	if !r.network {
		var c runtoken.Claims
		c, terr = s.verifier.VerifyFor(tok, p.RunID(), p.Attempt())
		if terr == nil && c.Expiry.Unix() != r.spec.TokenExpiry {
			// A token of another registration of the same run and attempt (an
			// earlier one): bound to its registration, it is not this one's.
			terr = &runtoken.Error{Reason: "other_registration", Detail: "the token was minted for another registration of this run"}
		}
	}
	if req.URL.Path == port.AttestationPath {
		if terr != nil {
			llmproxy.WriteError(w, http.StatusUnauthorized, "authentication_error", "run_token: "+terr.Error())
			return
		}
		llmproxy.ServeAttestation(w, req, p)
		return
	}
	if !p.Enter() {
		llmproxy.WriteError(w, http.StatusServiceUnavailable, "proxy_stopping", "proxy_stopping: the run's LLM proxy is stopping")
		return
	}
	if idErr != nil {
		r.engine.Refuse(w, req, p, req.URL.Path, &llmproxy.Refusal{Status: http.StatusUnauthorized, Blocked: "sandbox_id",
			Type: "authentication_error", Message: "sandbox_id: the X-Sandbox-ID header does not match this sandbox's registration"})
		return
	}
	if terr != nil {
		var te *runtoken.Error
		reason := "invalid"
		if errors.As(terr, &te) {
			reason = string(te.Reason)
		}
		r.engine.Refuse(w, req, p, req.URL.Path, &llmproxy.Refusal{Status: http.StatusUnauthorized, Blocked: "run_token: " + reason,
			Type: "authentication_error", Message: "run_token: " + terr.Error()})
		return
	}
	if ok, wait := r.allow(); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(wait.Seconds(), 1)))))
		r.engine.Refuse(w, req, p, req.URL.Path, &llmproxy.Refusal{Status: http.StatusTooManyRequests, Blocked: "rate_limited",
			Type: "rate_limit_exceeded", Message: "rate_limit: too many calls; retry after the Retry-After header's seconds"})
		return
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		default:
			w.Header().Set("Retry-After", "1")
			r.engine.Refuse(w, req, p, req.URL.Path, &llmproxy.Refusal{Status: http.StatusTooManyRequests, Blocked: "rate_limited: streams",
				Type: "rate_limit_exceeded", Message: "rate_limit: too many calls in flight for this run"})
			return
		}
	}
	r.engine.Forward(w, req, p, req.URL.Path)
}

// chunkedWriter drops the upstream's Content-Length, so every answer is chunked
// and ends with the terminating chunk the server writes after the handler
// returned, which is after the call's record was committed: a client that got
// a whole answer knows its record is on disk (see docs/proxyd.md, durability).
type chunkedWriter struct{ http.ResponseWriter }

func (w *chunkedWriter) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *chunkedWriter) Write(b []byte) (int, error) {
	// A write without WriteHeader implies 200; the header goes out now.
	w.Header().Del("Content-Length")
	return w.ResponseWriter.Write(b)
}

func (w *chunkedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// allow takes one call from the run's and the global rate limits, or says how
// long to wait.
func (r *run) allow() (bool, time.Duration) {
	now := time.Now()
	if r.lim != nil {
		res := r.lim.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			return false, d
		}
	}
	if g := r.s.global; g != nil {
		res := g.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			return false, d
		}
	}
	return true, 0
}

// validate turns a registration request into a proxy spec, checking it as the
// in-process proxy does. Errors wrap port.ErrInvalidSpec.
func validate(req api.RegisterRequest) (port.ProxySpec, error) {
	spec := port.ProxySpec{RunID: req.RunID, Attempt: req.Attempt, Upstream: req.Upstream, APIKey: req.APIKey,
		Attribution: portconv.Attribution(req.Attribution), Budget: portconv.Budget(req.Budget), RequireAttestation: req.RequireAttestation, Labels: req.Labels}
	if _, _, err := proxypolicy.ValidateSpec(spec); err != nil {
		return spec, err
	}
	if req.Egress != nil && req.Network != nil {
		return spec, port.Invalidf("egress needs a socket registration, not a network one")
	}
	if req.SandboxUID != nil && *req.SandboxUID < 0 {
		return spec, port.Invalidf("sandbox uid is negative")
	}
	if rl := req.Rate; rl != nil && (rl.RPS < 0 || rl.Burst < 0 || rl.Streams < 0 || math.IsNaN(rl.RPS) || math.IsInf(rl.RPS, 0)) {
		return spec, port.Invalidf("rate limit is negative or not a number")
	}
	return spec, nil
}
