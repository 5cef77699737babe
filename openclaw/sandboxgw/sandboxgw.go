// Package sandboxgw runs the real OpenClaw gateway inside a long-running sandbox
// (port.SessionRunner): no network at all (loopback only), Node and OpenClaw mounted
// read-only, its state on the writable workspace, reached from the host only through
// the unix socket the sandbox's bridge exposes its port on, and its LLM calls going to
// a billing router (openclaw/billing) through the socket mounted as the sandbox's LLM
// socket. Each run is registered with the router and prepared on the gateway (its own
// provider and, invariant 28, its session's model set by sessions.patch) before the
// agent turn, so every call is billed to the run that made it, and a call no run owns
// is refused.
//
// A Gateway watches its sandbox and its connection: when either ends, the runs in
// flight fail at once with an error wrapping ErrGatewayDown (never moved to another
// gateway: a run that failed is the caller's to retry, with its own registration), and,
// with Options.AutoRestart, a new sandbox is started with exponential backoff.
//
// With Options.Egress, the gateway's tools reach the web destinations the policy
// allows through the egress proxy (internal/egress) served in the same socket
// directory: the sandbox's bridge listens on port.EgressProxyAddr and the gateway gets
// the proxy and CA variables (port.EgressEnv); credentials are put into requests on
// the host ({{name}} placeholders) and never enter the sandbox.
package sandboxgw

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/port"
)

// Defaults of Options.
const (
	DefaultPort         = 18789
	DefaultReadyTimeout = 5 * time.Minute
	DefaultMemoryBytes  = 1536 << 20
	DefaultPIDs         = 512
	DefaultMinBackoff   = time.Second
	DefaultMaxBackoff   = 30 * time.Second
	// TokenEnv is the variable the gateway reads its auth token from: the config file
	// holds only a reference, so the token is on no disk.
	TokenEnv = "OPENCLAW_GATEWAY_TOKEN"
	// RouterURL is the billing router as the gateway sees it: the sandbox's bridge on
	// loopback, forwarding to the router's socket.
	RouterURL = "http://" + port.BridgeAddr
)

// Layout of a gateway's host directory (Options.Dir).
const (
	sockDir = "sock"      // the router's socket, mounted as the sandbox's LLM socket
	wsDir   = "workspace" // the sandbox's workspace: one directory per incarnation
)

// ErrGatewayDown reports a run that failed, or could not start, because the sandboxed
// gateway (its process, its sandbox or the connection to it) ended.
var ErrGatewayDown = errors.New("sandboxed openclaw gateway is down")

// DownError is the error of a run cut short by the gateway's end. It wraps
// ErrGatewayDown and the cause.
type DownError struct {
	// RunID is the run that failed (empty when none had started).
	RunID string
	// Cause is what ended the gateway: the sandbox's exit or the connection's error.
	Cause error
}

// Error implements error.
func (e *DownError) Error() string {
	if e.RunID == "" {
		return fmt.Sprintf("%v: %v", ErrGatewayDown, e.Cause)
	}
	return fmt.Sprintf("run %s: %v: %v", e.RunID, ErrGatewayDown, e.Cause)
}

// Unwrap returns ErrGatewayDown and the cause.
func (e *DownError) Unwrap() []error { return []error{ErrGatewayDown, e.Cause} }

// Options configure a sandboxed gateway. Runner, Router, Image, Command, Dir and
// Models are required.
type Options struct {
	// Runner starts the sandbox.
	Runner port.SessionRunner
	// Router is the billing router (billing.Router) the gateway's LLM calls go to.
	Router *billing.Router
	// Image is a runtime image with Node (OpenClaw needs Node >= 24).
	Image string
	// Command runs OpenClaw's CLI inside, e.g. node and openclaw.mjs under a mount.
	Command []string
	// Mounts are read-only mounts (OpenClaw's package tree; Node if not in the image).
	Mounts []port.Mount
	// Dir is the gateway's host directory (the router's socket, the gateway's state).
	// A host that re-attaches after a restart passes the same Dir.
	Dir string
	// Models are the gateway's models (as given to openclaw.WithModels); the first is
	// the default unless Config sets one.
	Models []openclaw.Model
	// Config are further config options (agent timeout, denied tools...). Gateway
	// mode, the workspace and the base URL are set here.
	Config []openclaw.Option
	// Port is the gateway's port inside the sandbox (default DefaultPort).
	Port int
	// RunID names the sandbox (each incarnation adds a suffix); generated when empty.
	RunID string
	// Token is the gateway's auth token; generated when empty. A host that re-attaches
	// passes the token it kept (Gateway.Token).
	Token string
	// Limits bound the sandbox (memory default DefaultMemoryBytes, PIDs DefaultPIDs,
	// lifetime port.DefaultSessionLifetime).
	Limits port.Limits
	// ReadyTimeout bounds the start-up (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Liveness is the client's liveness window (default: the client's, 2.5 gateway
	// ticks): a silent connection is declared dead after it. A crashed gateway is seen
	// sooner: its sandbox exits and the exposed socket closes.
	Liveness time.Duration
	// AutoRestart starts a new sandbox when the gateway goes down, waiting MinBackoff,
	// then doubling up to MaxBackoff between failed attempts.
	AutoRestart            bool
	MinBackoff, MaxBackoff time.Duration
	// Egress, if set, lets the gateway's tools reach what the policy allows through
	// the egress proxy, with the policy's Credentials resolved on the host; nil means
	// no web access at all. The gateway keeps one egress proxy (one CA, one audit)
	// across restarts; a host that re-attaches serves a new one with a new CA, which
	// the running gateway does not trust for HTTPS (it reads its CA bundle at start).
	Egress *port.EgressPolicy
	// EgressResolver looks host names up for the egress proxy (default
	// net.DefaultResolver); every address is still checked on each dial.
	EgressResolver Resolver
	// EgressUpstreamRoots are PEM certificates the egress proxy verifies upstream TLS
	// against instead of the system roots (private CAs, tests).
	EgressUpstreamRoots []byte
	// EgressUnsafeAllow exempts address ranges from the egress proxy's SSRF guard.
	// For tests whose upstreams listen on loopback only; never in production.
	EgressUnsafeAllow []netip.Prefix
	// Logger receives diagnostics; default discard.
	Logger *slog.Logger
}

// Resolver looks host names up for the egress proxy; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (o *Options) check() error {
	switch {
	case o.Runner == nil || o.Router == nil:
		return port.Invalidf("sandboxgw: Runner and Router are required")
	case o.Image == "" || len(o.Command) == 0:
		return port.Invalidf("sandboxgw: Image and Command are required")
	case !filepath.IsAbs(o.Dir):
		return port.Invalidf("sandboxgw: Dir %q must be an absolute path", o.Dir)
	case len(o.Models) == 0:
		return port.Invalidf("sandboxgw: at least one model is required")
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Port < 1 || o.Port > 65535 || o.Port == 8080 {
		return port.Invalidf("sandboxgw: port %d out of range or taken by the bridge", o.Port)
	}
	if o.RunID == "" {
		o.RunID = "ocgw-" + randHex(6)
	}
	if err := port.ValidateRunID(o.RunID + "-999"); err != nil {
		return err
	}
	if o.Token == "" {
		o.Token = randHex(24)
	}
	if len(o.Token) < 16 || strings.ContainsAny(o.Token, " \t\r\n\x00") {
		return port.Invalidf("sandboxgw: token must be at least 16 bytes without whitespace")
	}
	for i, m := range o.Mounts {
		if m.Writable {
			return port.Invalidf("sandboxgw: mount %d is writable; OpenClaw and Node are mounted read-only", i)
		}
	}
	if o.Limits.MemoryBytes == 0 {
		o.Limits.MemoryBytes = DefaultMemoryBytes
	}
	if o.Limits.PIDs == 0 {
		o.Limits.PIDs = DefaultPIDs
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Liveness < 0 {
		return port.Invalidf("sandboxgw: negative liveness window")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Egress == nil && (o.EgressResolver != nil || len(o.EgressUpstreamRoots) > 0 || len(o.EgressUnsafeAllow) > 0) {
		return port.Invalidf("sandboxgw: egress options without an Egress policy")
	}
	if err := o.Egress.Validate(); err != nil {
		return err
	}
	for _, p := range o.EgressUnsafeAllow {
		if !p.IsValid() {
			return port.Invalidf("sandboxgw: invalid EgressUnsafeAllow prefix")
		}
	}
	return nil
}

// Gateway is a sandboxed OpenClaw gateway and the host's connection to it. Its methods
// are safe for concurrent use.
type Gateway struct {
	opts Options
	log  *slog.Logger

	srv    *http.Server // the router on the socket the sandbox mounts
	srvErr chan error
	egress *egress.Front // nil without Options.Egress

	mu          sync.Mutex
	cur         *incarnation // nil while down
	last        *incarnation // the latest, up or down: Close removes it
	gen         int          // incarnations started
	downErr     error
	up          chan struct{} // closed when an incarnation is up; replaced when down
	closed      bool
	attestation []byte // the last isolation report the sandbox's bridge sent

	stop      context.CancelFunc // ends the supervisor
	superCtx  context.Context
	superOnce sync.Once  // the supervisor starts with the first incarnation
	restartMu sync.Mutex // one Restart at a time
	wg        sync.WaitGroup
}

// incarnation is one sandbox and its client.
type incarnation struct {
	sess   port.Session
	client *gateway.Client
	prep   *billing.Preparer
	down   chan struct{} // closed when it ended
	once   sync.Once
	cause  error
	retire sync.Once // its client closed and its sandbox removed
}

func (in *incarnation) end(cause error) {
	in.once.Do(func() {
		in.cause = cause
		close(in.down)
	})
}

// Start creates the gateway's directory, serves the router on its socket, starts the
// gateway in a sandbox and returns once a client has completed the handshake through
// the exposed socket (retrying the gateway's UNAVAILABLE while it starts). Errors wrap
// port.ErrInvalidSpec for bad options and ErrGatewayDown when the gateway did not come
// up; on error nothing is left running.
func Start(ctx context.Context, opts Options) (*Gateway, error) {
	g, err := newGateway(opts)
	if err != nil {
		return nil, err
	}
	in, err := g.startIncarnation(ctx)
	if err != nil {
		g.shutdownServer()
		return nil, err
	}
	g.install(in)
	return g, nil
}

// Attach rebuilds a Gateway around a running sandbox (its Session ID, from
// Gateway.ID) after the host process restarted: it serves the router on the socket
// again, attaches to the session and connects with opts.Token (the token the first
// host kept). opts are those the gateway was started with.
func Attach(ctx context.Context, opts Options, id string) (*Gateway, error) {
	g, err := newGateway(opts)
	if err != nil {
		return nil, err
	}
	sess, err := g.opts.Runner.Attach(ctx, id)
	if err != nil {
		g.shutdownServer()
		return nil, err
	}
	in, err := g.connect(ctx, sess)
	if err != nil {
		_ = sess.Detach()
		g.shutdownServer()
		return nil, err
	}
	g.mu.Lock()
	g.gen = generationOf(sess.RunID())
	g.mu.Unlock()
	g.install(in)
	return g, nil
}

func generationOf(runID string) int {
	i := strings.LastIndexByte(runID, '-')
	n, _ := strconv.Atoi(runID[i+1:])
	return n
}

func newGateway(opts Options) (*Gateway, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	g := &Gateway{opts: opts, log: opts.Logger, up: make(chan struct{}), srvErr: make(chan error, 1)}
	if err := g.serveRouter(); err != nil {
		return nil, err
	}
	if err := g.serveEgress(); err != nil {
		g.shutdownServer()
		return nil, err
	}
	g.superCtx, g.stop = context.WithCancel(context.Background())
	return g, nil
}

// serveEgress serves the egress proxy and its CA bundle next to the router's socket
// (see egress.Host.StartFront), when the options ask for egress.
func (g *Gateway) serveEgress() error {
	if g.opts.Egress == nil {
		return nil
	}
	pol, err := egress.Compile(g.opts.Egress)
	if err != nil {
		return err
	}
	h := egress.Host{UnsafeAllow: g.opts.EgressUnsafeAllow, RootsPEM: g.opts.EgressUpstreamRoots}
	if g.opts.EgressResolver != nil {
		h.Resolver = g.opts.EgressResolver
	}
	if len(g.opts.EgressUpstreamRoots) > 0 {
		h.Roots = x509.NewCertPool()
		if !h.Roots.AppendCertsFromPEM(g.opts.EgressUpstreamRoots) {
			return port.Invalidf("sandboxgw: EgressUpstreamRoots holds no PEM certificate")
		}
	}
	f, err := h.StartFront(egress.FrontConfig{RunID: g.opts.RunID, Policy: pol, Dir: filepath.Join(g.opts.Dir, sockDir), Logger: g.log})
	if err != nil {
		return fmt.Errorf("sandboxgw: egress: %w", err)
	}
	g.egress = f
	return nil
}

// EgressAudit implements port.EgressAuditor: the records of every egress request the
// gateway's sandbox made through this host (also after Close); nil without egress.
func (g *Gateway) EgressAudit() []port.EgressRecord {
	if g.egress == nil {
		return nil
	}
	return g.egress.Audit()
}

var _ port.EgressAuditor = (*Gateway)(nil)

// serveRouter listens on <Dir>/sock/llm.sock (mounted into the sandbox as its LLM
// socket) and serves the router there, plus the bridge's attestation.
func (g *Gateway) serveRouter() error {
	sd := filepath.Join(g.opts.Dir, sockDir)
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return fmt.Errorf("sandboxgw: %w", err)
	}
	sock := filepath.Join(sd, port.LLMSocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandboxgw: stale socket: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("sandboxgw: %w", err)
	}
	// The sandbox's user connects; only this sandbox mounts the directory.
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return fmt.Errorf("sandboxgw: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+attestationPath, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err == nil {
			g.mu.Lock()
			g.attestation = b
			g.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("/", g.opts.Router)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() { g.srvErr <- g.srv.Serve(ln) }()
	return nil
}

// attestationPath is where the bridge reports its sandbox's isolation.
const attestationPath = bridgeapi.AttestationPath

func (g *Gateway) shutdownServer() {
	if g.stop != nil {
		g.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.srv.Shutdown(ctx)
	if g.egress != nil {
		g.egress.Stop(ctx)
	}
	g.wg.Wait()
}

// startIncarnation starts a new sandbox (a fresh state directory) and connects.
func (g *Gateway) startIncarnation(ctx context.Context) (*incarnation, error) {
	g.mu.Lock()
	g.gen++
	gen := g.gen
	g.mu.Unlock()
	runID := fmt.Sprintf("%s-%d", g.opts.RunID, gen)
	ws := filepath.Join(g.opts.Dir, wsDir)
	if err := mkdirFor(ws, port.DefaultUser); err != nil {
		return nil, err
	}
	inc := "gw-" + strconv.Itoa(gen)
	incDir := filepath.Join(ws, inc)
	if err := mkdirFor(incDir, port.DefaultUser); err != nil {
		return nil, err
	}
	for _, d := range []string{"state", "home", "agent"} {
		if err := mkdirFor(filepath.Join(incDir, d), port.DefaultUser); err != nil {
			return nil, err
		}
	}
	inside := port.WorkspacePath + "/" + inc
	cfg, err := openclaw.NewConfig(append([]openclaw.Option{
		openclaw.WithModels(g.opts.Models...),
		openclaw.WithProviderName("unattributed"),
		openclaw.WithBaseURL(RouterURL + "/v1"),
		openclaw.WithWorkspace(inside + "/agent"),
		openclaw.WithGateway(openclaw.Gateway{Port: g.opts.Port, Bind: "loopback", TokenEnv: TokenEnv}),
	}, g.opts.Config...)...)
	if err != nil {
		return nil, fmt.Errorf("sandboxgw: config: %w", err)
	}
	cfgPath := filepath.Join(incDir, "openclaw.json")
	if err := cfg.WriteFile(cfgPath); err != nil {
		return nil, fmt.Errorf("sandboxgw: %w", err)
	}
	// The gateway rewrites its config on config.patch (per-run providers).
	if err := chownFor(cfgPath, port.DefaultUser); err != nil {
		return nil, err
	}
	argv := append(append([]string(nil), g.opts.Command...), "gateway", "--port", strconv.Itoa(g.opts.Port), "--bind", "loopback")
	spec := port.SessionSpec{
		RunSpec: port.RunSpec{
			RunID: runID, Image: g.opts.Image, Argv: argv,
			Env: map[string]string{
				TokenEnv:                   g.opts.Token,
				"HOME":                     inside + "/home",
				"OPENCLAW_CONFIG_PATH":     inside + "/openclaw.json",
				"OPENCLAW_STATE_DIR":       inside + "/state",
				"OPENCLAW_LOAD_SHELL_ENV":  "0",
				"OPENCLAW_DISABLE_BONJOUR": "1",
				"OPENCLAW_NO_AUTO_UPDATE":  "1",
				"OPENCLAW_SKIP_CHANNELS":   "1",
			},
			WorkspaceDir: ws,
			Mounts:       g.opts.Mounts,
			Limits:       g.opts.Limits,
			LLM:          &port.LLMSocket{HostDir: filepath.Join(g.opts.Dir, sockDir), Egress: g.egress != nil},
			Labels:       map[string]string{"agentsandbox-openclaw-gateway": g.opts.RunID},
		},
		Expose: []int{g.opts.Port},
	}
	sess, err := g.opts.Runner.Start(ctx, spec)
	if err != nil {
		return nil, &DownError{Cause: fmt.Errorf("starting the sandbox: %w", err)}
	}
	in, err := g.connect(ctx, sess)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = sess.Stop(sctx, 5*time.Second)
		cancel()
		return nil, err
	}
	return in, nil
}

// connect dials the gateway through the session's exposed socket until the handshake
// succeeds, the sandbox exits or ReadyTimeout passes.
func (g *Gateway) connect(ctx context.Context, sess port.Session) (*incarnation, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.ReadyTimeout)
	defer cancel()
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return sess.Dial(ctx, g.opts.Port) }
	var lastErr error
	for {
		gopts := []gateway.Option{gateway.WithToken(g.opts.Token), gateway.WithDialContext(dial), gateway.WithRetry(1, 0), gateway.WithLogger(g.log)}
		if g.opts.Liveness > 0 {
			gopts = append(gopts, gateway.WithLivenessTimeout(g.opts.Liveness))
		}
		c, err := gateway.Dial(ctx, "ws://127.0.0.1:"+strconv.Itoa(g.opts.Port), gopts...)
		if err == nil {
			prep, err := billing.NewPreparer(c, RouterURL, g.opts.Models, billing.WithPreparerLogger(g.log))
			if err != nil {
				_ = c.Close()
				return nil, err
			}
			return &incarnation{sess: sess, client: c, prep: prep, down: make(chan struct{})}, nil
		}
		lastErr = err
		var ge *gateway.Error
		if errors.Is(err, gateway.ErrAuth) || errors.Is(err, gateway.ErrProtocolMismatch) || (errors.As(err, &ge) && !ge.Retryable) {
			return nil, &DownError{Cause: err}
		}
		wait := 250 * time.Millisecond
		if errors.As(err, &ge) && ge.RetryAfter > 0 {
			wait = min(ge.RetryAfter, 2*time.Second)
		}
		select {
		case <-sess.Done():
			_, werr := sess.Wait(context.Background())
			out, errOut := sess.Logs()
			return nil, &DownError{Cause: fmt.Errorf("the gateway exited during start-up (%v; last dial error: %v)\nstdout: %s\nstderr: %s", werr, lastErr, tail(out), tail(errOut))}
		case <-ctx.Done():
			out, errOut := sess.Logs()
			return nil, &DownError{Cause: fmt.Errorf("not ready after %v: %v\nstdout: %s\nstderr: %s", g.opts.ReadyTimeout, lastErr, tail(out), tail(errOut))}
		case <-time.After(wait):
		}
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// install makes in the current incarnation and watches it.
func (g *Gateway) install(in *incarnation) {
	g.mu.Lock()
	g.cur, g.last = in, in
	g.downErr = nil
	close(g.up)
	g.mu.Unlock()
	g.superOnce.Do(func() {
		g.wg.Add(1)
		go g.supervise(g.superCtx)
	})
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		select {
		case <-in.sess.Done():
			_, err := in.sess.Wait(context.Background())
			if err == nil {
				err = errors.New("the gateway's sandbox exited")
			}
			in.end(err)
		case <-in.client.Done():
			in.end(in.client.Err())
		case <-in.down:
		}
		g.markDown(in)
	}()
}

// markDown records that in ended (runs in flight see in.down at once).
func (g *Gateway) markDown(in *incarnation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur != in {
		return
	}
	g.cur = nil
	g.downErr = in.cause
	g.up = make(chan struct{})
	if !g.closed {
		g.log.Warn("sandboxed gateway down", "err", in.cause)
	}
}

// supervise restarts the gateway when it is down and AutoRestart is set.
func (g *Gateway) supervise(ctx context.Context) {
	defer g.wg.Done()
	backoff := g.opts.MinBackoff
	for {
		g.mu.Lock()
		cur, closed := g.cur, g.closed
		g.mu.Unlock()
		if closed || ctx.Err() != nil {
			return
		}
		if cur != nil {
			select {
			case <-cur.down:
				g.retire(cur, 5*time.Second)
				backoff = g.opts.MinBackoff
				// Until the watcher has marked it down.
				for g.isCurrent(cur) && ctx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			case <-ctx.Done():
				return
			}
			continue
		}
		if !g.opts.AutoRestart {
			select {
			case <-ctx.Done():
				return
			case <-g.upChan():
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		case <-g.upChan(): // restarted by hand meanwhile
			continue
		}
		if err := g.Restart(ctx); err != nil {
			g.log.Warn("restarting the sandboxed gateway failed", "err", err, "next_attempt_in", min(backoff*2, g.opts.MaxBackoff))
			backoff = min(backoff*2, g.opts.MaxBackoff)
		}
	}
}

func (g *Gateway) isCurrent(in *incarnation) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur == in
}

func (g *Gateway) upChan() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.up
}

// retire closes an incarnation's client and removes its sandbox (once).
func (g *Gateway) retire(in *incarnation, grace time.Duration) {
	in.retire.Do(func() {
		_ = in.client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
		defer cancel()
		if _, err := in.sess.Stop(ctx, grace); err != nil {
			g.log.Warn("removing the gateway's sandbox failed; a Sweep will", "err", err)
		}
	})
}

// Restart starts a new sandbox if the gateway is down (a no-op when it is up). Runs
// that were in flight are not resumed: they failed with ErrGatewayDown.
func (g *Gateway) Restart(ctx context.Context) error {
	g.restartMu.Lock()
	defer g.restartMu.Unlock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return fmt.Errorf("%w: gateway closed", port.ErrClosed)
	}
	old := g.cur
	g.mu.Unlock()
	if old != nil {
		select {
		case <-old.down:
			g.retire(old, 5*time.Second)
		default:
			return nil
		}
	}
	in, err := g.startIncarnation(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.closed || g.cur != nil {
		g.mu.Unlock()
		g.retire(in, 10*time.Second)
		return nil
	}
	g.mu.Unlock()
	g.install(in)
	return nil
}

// WaitUp blocks until the gateway is up (after a restart) or ctx ends.
func (g *Gateway) WaitUp(ctx context.Context) error {
	for {
		g.mu.Lock()
		cur, up, closed := g.cur, g.up, g.closed
		g.mu.Unlock()
		if closed {
			return fmt.Errorf("%w: gateway closed", port.ErrClosed)
		}
		if cur != nil {
			select {
			case <-cur.down: // dead, not marked yet
			default:
				return nil
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		select {
		case <-up:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *Gateway) current() (*incarnation, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("%w: gateway closed", port.ErrClosed)
	}
	if g.cur == nil {
		return nil, &DownError{Cause: g.downErr}
	}
	return g.cur, nil
}

// ID is the current sandbox's session ID (for Attach); empty while down.
func (g *Gateway) ID() string {
	in, err := g.current()
	if err != nil {
		return ""
	}
	return in.sess.ID()
}

// Session is the current sandbox; nil while down.
func (g *Gateway) Session() port.Session {
	in, err := g.current()
	if err != nil {
		return nil
	}
	return in.sess
}

// Client is the current connection to the gateway. Errors wrap ErrGatewayDown.
func (g *Gateway) Client() (*gateway.Client, error) {
	in, err := g.current()
	if err != nil {
		return nil, err
	}
	return in.client, nil
}

// Token is the gateway's auth token, for a host that re-attaches after a restart.
func (g *Gateway) Token() string { return g.opts.Token }

// Attestation is the last isolation report the sandbox's bridge sent (JSON), if any.
func (g *Gateway) Attestation() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]byte(nil), g.attestation...)
}

// RunRequest is one agent turn of a registered run.
type RunRequest struct {
	// Registration is the run's registration with the Router (billing.Router.Register).
	Registration *billing.Registration
	// SessionKey names the OpenClaw session (e.g. "<account>-<run>").
	SessionKey string
	// Model is the model ID the session uses (one of Options.Models); set on the
	// session before the turn (invariant 28).
	Model string
	// Message is the user message.
	Message string
	// Timeout is the gateway-side turn timeout (0: the gateway's default).
	Timeout time.Duration
}

// Run prepares the run on the gateway (its provider, its session's model), runs one
// agent turn and releases the session. It fails with an error wrapping ErrGatewayDown
// (a *DownError naming the run) as soon as the gateway goes down, whatever ctx says.
func (g *Gateway) Run(ctx context.Context, req RunRequest) (*gateway.AgentResult, error) {
	if req.Registration == nil || req.SessionKey == "" || req.Model == "" || req.Message == "" {
		return nil, port.Invalidf("sandboxgw: Registration, SessionKey, Model and Message are required")
	}
	in, err := g.current()
	if err != nil {
		return nil, err
	}
	runID := req.Registration.RunID()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-in.down:
			cancel(&DownError{RunID: runID, Cause: in.cause})
		case <-ctx.Done():
		}
	}()
	downErr := func(err error) error {
		if c := context.Cause(ctx); c != nil {
			var de *DownError
			if errors.As(c, &de) {
				return de
			}
		}
		select {
		case <-in.down:
			return &DownError{RunID: runID, Cause: in.cause}
		case <-in.client.Done():
			// The connection ended before the watcher said so: the same event.
			return &DownError{RunID: runID, Cause: in.client.Err()}
		default:
			return err
		}
	}
	s, err := in.prep.Prepare(ctx, req.Registration, req.SessionKey, req.Model)
	if err != nil {
		return nil, downErr(fmt.Errorf("sandboxgw: prepare run %s: %w", runID, err))
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		select {
		case <-in.down:
		default:
			if err := in.prep.Release(rctx, s); err != nil {
				g.log.Warn("releasing a run's session failed", "run_id", runID, "err", err)
			}
		}
	}()
	run, err := in.client.Agent(ctx, gateway.AgentRequest{Message: req.Message, SessionKey: s.Key, Timeout: req.Timeout})
	if err != nil {
		return nil, downErr(fmt.Errorf("sandboxgw: run %s: %w", runID, err))
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return res, downErr(fmt.Errorf("sandboxgw: run %s: %w", runID, err))
	}
	return res, nil
}

// Detach lets go of the gateway without stopping it: the connection closes, the
// router's socket goes (a restarted host serves it again with Attach) and the sandbox
// keeps running for Attach.
func (g *Gateway) Detach() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	in, last := g.cur, g.last
	g.cur = nil
	g.mu.Unlock()
	g.stop()
	if in != nil {
		in.end(errors.New("detached"))
		in.retire.Do(func() {
			_ = in.client.Close()
			_ = in.sess.Detach()
		})
	} else if last != nil {
		g.retire(last, 5*time.Second) // a dead gateway is not left behind
	}
	g.shutdownServer()
	return nil
}

// Close stops the gateway's sandbox (TERM, then KILL after 10 seconds; a dead one is
// removed), its router socket and the supervisor.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	last := g.last
	g.cur = nil
	g.mu.Unlock()
	g.stop()
	if last != nil {
		last.end(errors.New("closed"))
	}
	g.shutdownServer() // the watchers have ended with last
	if last != nil {
		g.retire(last, 10*time.Second)
	}
	return ctx.Err()
}

// mkdirFor makes dir (if missing) owned by the sandbox's user.
func mkdirFor(dir, user string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("sandboxgw: %w", err)
	}
	return chownFor(dir, user)
}

func chownFor(p, user string) error {
	a, b, _ := strings.Cut(user, ":")
	uid, _ := strconv.Atoi(a)
	gid, _ := strconv.Atoi(b)
	if err := os.Lchown(p, uid, gid); err != nil {
		// Not root: open it up instead (the directory is the gateway's alone).
		return os.Chmod(p, 0o777)
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
