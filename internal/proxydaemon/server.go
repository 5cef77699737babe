// Package proxydaemon is the shared LLM proxy daemon (cmd/sandbox-proxyd): one process
// serving many runs with the one proxy engine (internal/llmproxy). Each run gets
// its own directory under the socket directory holding its socket and its run
// token; the socket a request arrives on names the run, and the request's
// X-Run-Token must agree. Runs, their budgets and audits live in the identity
// registry (internal/proxydaemon/identity), so a restarted daemon serves the same runs at the
// same socket paths and their budgets continue. Hosts manage runs through the
// admin API (adapters/proxyd) on a unix socket only its owner can use.
package proxydaemon

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/time/rate"

	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
)

// Defaults.
const (
	DefaultTokenTTL      = 24 * time.Hour
	DefaultFlushInterval = 10 * time.Second
	// DBName is the registry's file name in the state directory.
	DBName = "proxyd.db"
	// maxSocketPath is the longest socket path accepted (Linux allows 107 bytes).
	maxSocketPath = 104
	// suffixLen is the random hex suffix of a run directory's name.
	suffixLen = 8
	// handlerGrace bounds the wait for handlers after their connections were cut.
	handlerGrace = 5 * time.Second
)

// Config configures a Server.
type Config struct {
	// StateDir holds the registry (DBName); SocketDir the per-run directories.
	// Both are created mode 0700 and 0711 if missing.
	StateDir, SocketDir string
	// Keys sign and verify run tokens and seal the registry's copies of API keys.
	Keys runtoken.Keys
	// TokenTTL is a run token's lifetime (default DefaultTokenTTL).
	TokenTTL time.Duration
	// TTL and GCInterval are the registry's (defaults identity.DefaultTTL and
	// identity.DefaultGCInterval); FlushInterval is how often renewed last_seen
	// times are written (default DefaultFlushInterval).
	TTL, GCInterval, FlushInterval time.Duration
	// MaxRequestBytes bounds a call's body (default 64 MiB).
	MaxRequestBytes int64
	// Rate is the default per-run limit; GlobalRPS and GlobalBurst limit all runs
	// together (0: no limit).
	Rate        api.RateLimit
	GlobalRPS   float64
	GlobalBurst int
	// ConnsPerRun and ConnsTotal cap open connections (defaults
	// llmproxy.DefaultConnsPerRun and 65,536: one daemon serves thousands of runs).
	ConnsPerRun, ConnsTotal int
	// AdminUIDs may use the admin socket besides the daemon's own uid.
	AdminUIDs []int
	// UpstreamKey, if set, is the upstream key the daemon itself holds (read from a
	// file, such as a Kubernetes Secret mounted into the daemon alone): every
	// registration gets it, and one that carries a key of its own is refused, so the
	// key never travels through the admin API or the host application. It is called
	// at each registration, so a rotated file takes effect for the next run.
	UpstreamKey func() (string, error)
	// Transport reaches upstreams (default llmproxy.NewTransport).
	Transport http.RoundTripper
	// Egress configures the egress fronts of runs registered with an egress
	// policy (resolver, upstream roots, upstream proxy).
	Egress egress.Host
	Logger *slog.Logger
	// Telemetry receives every call's span and metrics (default: the global
	// OpenTelemetry providers); sandbox-proxyd exports its metrics to Prometheus.
	Telemetry *telemetry.T
}

// Server is the daemon. Open it, serve the admin API with ServeAdmin, Close it.
type Server struct {
	cfg      Config
	log      *slog.Logger
	reg      *identity.Registry
	verifier *runtoken.Verifier
	seal     [2][]byte // sealing keys: current, previous
	global   *rate.Limiter
	conns    *llmproxy.ConnLimit
	srv      *http.Server // every run socket

	// lastExpiry is the token expiry last given to each run id and attempt: a
	// new registration's is later, so a token of an earlier one is not its
	// (guarded by mu).
	lastExpiry map[string]int64
	mu         sync.Mutex
	runs       map[string]*run // by registration id
	engines    map[string]*llmproxy.Engine
	closed     bool

	stopLoops context.CancelFunc
	loops     sync.WaitGroup
}

// Open validates cfg, opens the registry and brings back every run it holds:
// each run's socket is listening again at its old path when Open returns. A
// corrupt registry gives an error wrapping identity.ErrCorrupt.
func Open(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case !filepath.IsAbs(cfg.StateDir) || !filepath.IsAbs(cfg.SocketDir):
		return nil, port.Invalidf("proxyd: state and socket directories must be absolute")
	case len(cfg.SocketDir)+1+2+suffixLen+1+len(port.LLMSocketName) > maxSocketPath:
		return nil, port.Invalidf("proxyd: socket directory %q is too long for unix socket paths", cfg.SocketDir)
	case cfg.Rate.RPS < 0 || cfg.Rate.Burst < 0 || cfg.Rate.Streams < 0 || cfg.GlobalRPS < 0 || cfg.GlobalBurst < 0:
		return nil, port.Invalidf("proxyd: negative rate limit")
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = identity.DefaultGCInterval
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 64 << 20
	}
	if cfg.ConnsPerRun <= 0 {
		cfg.ConnsPerRun = llmproxy.DefaultConnsPerRun
	}
	if cfg.ConnsTotal <= 0 {
		cfg.ConnsTotal = 1 << 16
	}
	if cfg.Transport == nil {
		cfg.Transport = llmproxy.NewTransport()
	}
	v, err := runtoken.NewVerifier(cfg.Keys, runtoken.WithMaxTTL(cfg.TokenTTL))
	if err != nil {
		return nil, fmt.Errorf("%w: proxyd: %w", port.ErrInvalidSpec, err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("proxyd: state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.SocketDir, 0o711); err != nil {
		return nil, fmt.Errorf("proxyd: socket dir: %w", err)
	}
	reg, err := identity.Open(ctx, identity.Config{Path: filepath.Join(cfg.StateDir, DBName), TTL: cfg.TTL})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, reg: reg, verifier: v, runs: map[string]*run{}, engines: map[string]*llmproxy.Engine{},
		conns: llmproxy.NewConnLimit(cfg.ConnsTotal)}
	s.seal[0] = sealKey(cfg.Keys.Current)
	if cfg.Keys.Previous != nil {
		s.seal[1] = sealKey(cfg.Keys.Previous)
	}
	if cfg.GlobalRPS > 0 {
		s.global = rate.NewLimiter(rate.Limit(cfg.GlobalRPS), max(cfg.GlobalBurst, 1))
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveRun),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// A run's stop waits for its connections to go idle: the end of a chunked
		// answer is written after the handler returned.
		ConnState: func(c net.Conn, st http.ConnState) {
			if rc, ok := c.(*runConn); ok {
				rc.state.Store(int32(st))
			}
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if rc, ok := c.(*runConn); ok {
				return context.WithValue(ctx, runKey{}, rc.run)
			}
			return ctx
		},
	}
	if err := s.restore(ctx); err != nil {
		reg.Close()
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	s.stopLoops = cancel
	s.loops.Add(1)
	go s.housekeeping(lctx)
	return s, nil
}

func sealKey(secret []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("agentsandbox proxyd registry seal v1"))
	return h.Sum(nil)
}

// restore brings back the runs of the registry.
func (s *Server) restore(ctx context.Context) error {
	for _, g := range s.reg.List() {
		if g.State != identity.Active {
			continue
		}
		var spec storedSpec
		if err := s.unseal(g.Spec, &spec); err != nil {
			s.log.Error("proxyd: cannot restore a run: its spec does not open with the current or previous secret", "run_id", g.RunID, "id", g.ID, "err", err)
			continue
		}
		recs, _, err := s.reg.Audit(ctx, g.ID, 0)
		if err != nil {
			return err
		}
		if spec.Req.Egress != nil {
			// Its CA key and credential values lived only in the old process.
			s.log.Warn("proxyd: a restored run's egress is not served: its credentials were held in memory only", "run_id", g.RunID, "id", g.ID)
		}
		att, err := s.reg.Attestation(ctx, g.ID)
		if err != nil {
			s.log.Error("proxyd: cannot restore a run's attestation", "run_id", g.RunID, "id", g.ID, "err", err)
			continue
		}
		r, err := s.newRun(g, spec, nil, llmproxy.Restored{Used: llmproxy.Usage{Calls: g.Calls, Tokens: g.Tokens}, Records: recs, Attestation: att})
		if err != nil {
			s.log.Error("proxyd: cannot restore a run", "run_id", g.RunID, "id", g.ID, "err", err)
			continue
		}
		if !r.network {
			if err := r.listen(); err != nil {
				s.log.Error("proxyd: cannot restore a run's socket", "run_id", g.RunID, "id", g.ID, "err", err)
				continue
			}
			// A killed daemon leaves the egress socket and bundle behind: nobody
			// serves them now.
			for _, f := range []string{port.EgressSocketName, port.EgressCAName} {
				_ = os.Remove(filepath.Join(r.dir, f))
			}
		}
		s.mu.Lock()
		s.runs[g.ID] = r
		s.mu.Unlock()
		s.log.Info("proxyd: run restored", "run_id", g.RunID, "id", g.ID, "calls", g.Calls, "records", len(recs))
	}
	return nil
}

// housekeeping flushes renewals and collects expired registrations.
func (s *Server) housekeeping(ctx context.Context) {
	defer s.loops.Done()
	flush := time.NewTicker(s.cfg.FlushInterval)
	gc := time.NewTicker(s.cfg.GCInterval)
	defer flush.Stop()
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-flush.C:
			if err := s.reg.Flush(ctx); err != nil {
				s.log.Warn("proxyd: flush", "err", err)
			}
		case <-gc.C:
			gone, err := s.reg.GC(ctx)
			if err != nil {
				s.log.Warn("proxyd: gc", "err", err)
			}
			for _, g := range gone {
				s.log.Info("proxyd: registration expired", "run_id", g.RunID, "id", g.ID, "last_seen", g.LastSeen)
				if r := s.take(g.ID); r != nil {
					_ = r.stop(ctx, 0)
				}
			}
		}
	}
}

func (s *Server) take(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	delete(s.runs, id)
	return r
}

func (s *Server) engine(u *url.URL) (*llmproxy.Engine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := u.String()
	if e := s.engines[key]; e != nil {
		return e, nil
	}
	e, err := llmproxy.NewEngine(llmproxy.Config{Upstream: u, Transport: s.cfg.Transport, MaxRequestBytes: s.cfg.MaxRequestBytes, Logger: s.log, Telemetry: s.cfg.Telemetry})
	if err != nil {
		return nil, err
	}
	s.engines[key] = e
	return e, nil
}

// Close stops serving every run's socket without deregistering any (their
// sockets come back when the daemon opens again), flushes the registry and
// closes it. Calls in flight are cut.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rs := make([]*run, 0, len(s.runs))
	for _, r := range s.runs {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	s.stopLoops()
	s.loops.Wait()
	_ = s.srv.Close()
	cut, cancelCut := context.WithCancel(context.Background())
	cancelCut()
	for _, r := range rs {
		r.closeListener()
		r.cutConns()
		r.stopEgress(cut)
	}
	// Handlers whose connections were cut still store their records.
	ctx, cancel := context.WithTimeout(context.Background(), handlerGrace)
	defer cancel()
	for _, r := range rs {
		if _, err := r.meter.Stop(ctx); err != nil {
			s.log.Warn("proxyd: calls still in flight at close", "run_id", r.meter.RunID(), "err", err)
		}
	}
	return s.reg.Close()
}

// ServeNetwork serves network sandboxes (registered with a NetworkIdentity) on
// ln, a TCP listener on the sandboxes' internal network, until ln is closed or
// the server is. A request's source IP names its run.
func (s *Server) ServeNetwork(ln net.Listener) error { return s.srv.Serve(ln) }

// Runs is the number of runs served.
func (s *Server) Runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs)
}

var errClosed = fmt.Errorf("%w: proxyd: server closed", port.ErrUnavailable)
