package sandboxgw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/port"
)

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
