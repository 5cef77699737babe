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
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/egress"
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
	attestation []byte // the isolation report the latest sandbox's bridge sent
	attestKey   string // the latest sandbox's attestation key
	attested    bool   // the latest sandbox's bridge has reported

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
