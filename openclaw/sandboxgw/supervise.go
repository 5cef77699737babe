package sandboxgw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/port"
)

// startIncarnation starts a new sandbox (a fresh state directory) and connects.
func (g *Gateway) startIncarnation(ctx context.Context) (*incarnation, error) {
	g.mu.Lock()
	g.gen++
	gen := g.gen
	// Each sandbox's bridge attests with a key of its own: no process of an
	// earlier incarnation, nor the gateway itself, can report for it.
	key := bridgeapi.NewAttestKey()
	g.attestKey, g.attested = key, false
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
			LLM:          &port.LLMSocket{HostDir: filepath.Join(g.opts.Dir, sockDir), Egress: g.egress != nil, AttestKey: key},
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

// Attestation is the isolation report the bridge of the latest sandbox sent (JSON),
// or of an earlier one while the latest has not; nil before any. Only a report
// carrying the sandbox's attestation key counts, the first one.
func (g *Gateway) Attestation() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]byte(nil), g.attestation...)
}
