package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/port"
)

// SessionRequest is a long-running sandbox with everything a Run has: the grant, the
// messages file, LLM access through the session's own proxy (attribution, budget,
// attestation, egress), a repository, and the audit, policy outcomes and
// reconciliation when the session stops.
type SessionRequest struct {
	// Request is the sandbox and its LLM access, as for Run. Argv (or the image's
	// entrypoint) is the session's main process; Limits.Timeout is the session's
	// lifetime (default port.DefaultSessionLifetime). Reconcile and ReconcileAsync
	// apply at Stop. Stdout, Stderr, OutputLimit and Preload must be unset (a session
	// keeps its output in its log, bounded by LogLimit: see Session.Follow and
	// CopyLogs; it starts cold).
	Request
	// Expose lists loopback TCP ports in the sandbox the host may reach
	// (Session.Dial).
	Expose []int
	// LogLimit is how much of each of stdout and stderr the session keeps (default
	// port.DefaultLogLimit).
	LogLimit int
}

// Session is a long-running sandbox started by Sandbox.Start, with its LLM proxy. The
// host execs commands in it, moves files through its workspace and reaches its
// exposed ports; Stop ends it and returns a Result as Run does. Its methods are safe
// for concurrent use.
//
// The proxy lives in the host process (or the proxy manager's daemon) and the session
// holds it until Stop: a host that exits without Stop leaves the sandbox to end at its
// lifetime, and its calls unreconciled (they are in the proxy's audit and LiteLLM's
// spend logs under the run's attribution).
type Session struct {
	sb      *Sandbox
	req     SessionRequest
	sess    port.Session
	proxy   port.Proxy // nil without LLM access
	repo    *RepoResult
	started time.Time
	log     *slog.Logger
	from    *Hibernation // the hibernation it resumed from (hibernate.go)

	// done removes the workspace Open made for the session, after Stop.
	done func()

	stopOnce sync.Once
	res      *Result
	err      error
}

// Start starts a session: it checks req as Run does (nothing is started on bad input),
// clones the repository, writes the messages, starts the session's proxy and then the
// sandbox, and returns once the sandbox's process runs and its exposed ports' sockets
// exist. The runner must support sessions (port.SessionRunner). On any error
// everything started is stopped. Errors: those of Run before the sandbox runs, and
// port.ErrUnsupported for a runner without sessions.
func (s *Sandbox) Start(ctx context.Context, req SessionRequest) (_ *Session, err error) {
	defer func() { err = withHint(err) }()
	var done func()
	if req.Request, done, err = s.withDefaults(req.Request); err != nil {
		return nil, err
	}
	// The workspace Open made goes with the session: at Stop, or now if it fails.
	defer func() {
		if err != nil {
			done()
		}
	}()
	runner, spec, pspec, err := s.planSession(req)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		return nil, fmt.Errorf("sandbox: session %s: %w", req.RunID, err)
	}
	if s.llm != nil {
		if pspec.APIKey, err = s.proxyKey(ctx, spec.WithDefaults().Limits.Timeout); err != nil {
			return fail(err)
		}
	}
	ss := &Session{sb: s, req: req, done: done, log: s.logger.With(logattr.RunID, req.RunID, logattr.Attempt, req.Attempt)}
	if req.Repo != nil {
		if ss.repo, err = s.cloneRepo(ctx, req.Request); err != nil {
			return fail(err)
		}
	}
	if err := writeMessages(req.WorkspaceDir, s.messagesFile, req.Messages); err != nil {
		return fail(err)
	}
	ss.started = time.Now()
	if s.llm != nil {
		ss.proxy, err = s.llm.Proxy.Start(ctx, pspec)
		if err != nil {
			return fail(fmt.Errorf("starting proxy: %w", err))
		}
		// A failed start (or a panic below) must not leave the proxy, and its key,
		// behind.
		defer func() {
			v := recover()
			if err != nil || v != nil {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if _, serr := ss.proxy.Stop(sctx); serr != nil {
					ss.log.Warn("stopping the proxy of a failed session start failed", logattr.Err, serr)
				}
			}
			if v != nil {
				panic(v)
			}
		}()
		sock := ss.proxy.Socket()
		spec.LLM = &sock
	}
	if ss.sess, err = runner.Start(ctx, spec); err != nil {
		return fail(err)
	}
	ss.log.Info("session started", "id", ss.sess.ID())
	return ss, nil
}

// planSession checks a session request as Run checks a run's (nothing is started) and
// returns the session runner, the session's spec and its proxy's spec (without its key).
func (s *Sandbox) planSession(req SessionRequest) (port.SessionRunner, port.SessionSpec, port.ProxySpec, error) {
	var spec port.SessionSpec
	var pspec port.ProxySpec
	fail := func(err error) (port.SessionRunner, port.SessionSpec, port.ProxySpec, error) {
		return nil, spec, pspec, fmt.Errorf("sandbox: session %s: %w", req.RunID, err)
	}
	if !req.Grant.AllowSandbox {
		return nil, spec, pspec, fmt.Errorf("sandbox: session %q: %w: the system grant does not allow sandboxes", req.RunID, ErrNotPermitted)
	}
	if err := port.ValidateRunID(req.RunID); err != nil {
		return nil, spec, pspec, fmt.Errorf("sandbox: %w%s", err, s.runIDHint(req.RunID))
	}
	if err := s.checkRequest(req.Request, true); err != nil {
		return fail(err)
	}
	runner, ok := s.runner.(port.SessionRunner)
	if !ok {
		return fail(fmt.Errorf("%w: the runner has no sessions", port.ErrUnsupported))
	}
	egressPolicy, err := s.egressPolicy(req.Request)
	if err != nil {
		return fail(err)
	}
	spec = port.SessionSpec{
		RunSpec: port.RunSpec{
			RunID: req.RunID, Image: req.Image, Argv: req.Argv, Env: s.agentEnv(req.Request),
			WorkspaceDir: req.WorkspaceDir, Mounts: req.Mounts, Limits: req.Limits,
			User: req.User, Network: req.Network, Labels: req.Labels, OwnBridge: req.OwnBridge,
		},
		Expose: req.Expose, LogLimit: req.LogLimit,
	}
	if err := checkSpec(spec.WithDefaults().Validate(), spec.RunSpec, "SessionRequest", "session"); err != nil {
		return fail(err)
	}
	pspec = s.proxySpec(req.Request, egressPolicy)
	// What the adapters declare they cannot do is refused before any side effect.
	if err := s.checkCapabilities(spec.RunSpec, pspec); err != nil {
		return fail(err)
	}
	if err := s.checkRepo(req.Request); err != nil {
		return fail(err)
	}
	if err := s.checkWorkspace(req.WorkspaceDir, spec.WithDefaults().User); err != nil {
		return fail(err)
	}
	return runner, spec, pspec, nil
}

// ID is the runner's session ID.
func (ss *Session) ID() string { return ss.sess.ID() }

// RunID is the request's run ID.
func (ss *Session) RunID() string { return ss.req.RunID }

// Done is closed when the session's main process has exited.
func (ss *Session) Done() <-chan struct{} { return ss.sess.Done() }

// Wait waits for the session's main process to exit (see port.Session.Wait). The proxy
// keeps serving execs until Stop.
func (ss *Session) Wait(ctx context.Context) (*port.RunResult, error) { return ss.sess.Wait(ctx) }

// Exec runs a command in the session (see port.Session.Exec): it reaches the LLM
// through the session's proxy as the main process does, counted against the same
// budget and audited under the same run.
func (ss *Session) Exec(ctx context.Context, spec port.ExecSpec) (*port.ExecResult, error) {
	return ss.sess.Exec(ctx, spec)
}

// ReadFile reads a file of the workspace (see port.Session.ReadFile).
func (ss *Session) ReadFile(name string, max int64) ([]byte, error) {
	return ss.sess.ReadFile(name, max)
}

// WriteFile writes a file of the workspace (see port.Session.WriteFile).
func (ss *Session) WriteFile(name string, data []byte, perm fs.FileMode) error {
	return ss.sess.WriteFile(name, data, perm)
}

// Dial connects to an exposed port on the sandbox's loopback (see port.Session.Dial).
func (ss *Session) Dial(ctx context.Context, p int) (net.Conn, error) { return ss.sess.Dial(ctx, p) }

// Logs returns the tails of the main process's stdout and stderr.
func (ss *Session) Logs() (stdout, stderr []byte) { return ss.sess.Logs() }

// Audit returns the proxy's records of the session's calls so far, where the proxy
// can tell before it stops (adapters/inprocproxy's can); nil otherwise. Stop returns them
// all.
func (ss *Session) Audit() []port.AuditRecord {
	if la, ok := ss.proxy.(interface{ Audit() []port.AuditRecord }); ok {
		return la.Audit()
	}
	return nil
}

// Stop ends the session: the sandbox (SIGTERM, SIGKILL after grace; see
// port.Session.Stop), then its proxy. It returns the session's Result as Run does:
// the main process's outcome, the audit of every call (the main process's and every
// exec's), the policy outcomes, the attestation and egress records, the
// reconciliation asked for, and the repository's export and push (a session stopped
// by the host counts as a successful run for the push unless it had failed: timed
// out, OOM-killed). The result is non-nil whenever the sandbox ran; errors are those
// of Run after the run. Stop is idempotent: a second call returns the same.
func (ss *Session) Stop(ctx context.Context, grace time.Duration) (*Result, error) {
	ss.stopOnce.Do(func() {
		ss.res, ss.err = ss.stop(ctx, grace)
		ss.err = withHint(ss.err)
		ss.done()
	})
	return ss.res, ss.err
}

func (ss *Session) stop(ctx context.Context, grace time.Duration) (*Result, error) {
	s, req := ss.sb, ss.req
	res := &Result{RunID: req.RunID, Repo: ss.repo}
	run, runErr := ss.sess.Stop(ctx, grace)
	res.Run = run
	if ss.proxy != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		audit, serr := ss.proxy.Stop(sctx)
		cancel()
		res.Audit = audit
		if a, ok := ss.proxy.(port.Attester); ok {
			res.Attestation = withRuntime(a.Attestation(), s.runner)
		}
		if a, ok := ss.proxy.(port.EgressAuditor); ok {
			res.Egress = a.EgressAudit()
		}
		if serr != nil {
			ss.log.Warn("stopping proxy failed", logattr.Err, serr)
			runErr = errors.Join(runErr, fmt.Errorf("stopping proxy: %w", serr))
		}
	}
	if res.Run == nil {
		if runErr == nil {
			runErr = fmt.Errorf("%w: runner returned no result", port.ErrInternal)
		}
		res.Run = &port.RunResult{ExitCode: -1, ErrorCode: port.CodeInternal}
	}
	res.Text = strings.TrimSpace(string(res.Run.Stdout))
	res.Policy = policyOf(res.Audit)
	errs := []error{runErr}
	if req.FailOnBudget && res.Policy.BudgetExceeded {
		errs = append(errs, budgetError(res.Policy))
	}
	errs = append(errs, s.reconcileInto(ctx, req.Request, res, ss.started, ss.log))
	if ss.repo != nil {
		// The host ended the session: that is its normal end, not a failed run.
		outcome := *res.Run
		if runErr == nil && outcome.ErrorCode == "" {
			outcome.ExitCode = 0
		}
		errs = append(errs, s.finishRepo(ctx, req.Request, &outcome, ss.repo))
	}
	// Every segment of the session so far, this one last (hibernate.go).
	segs, serr := s.segments(ctx, ss.from, ss.segment(res), req.Request)
	res.Segments = segs
	errs = append(errs, serr)
	ss.log.Info("session stopped", "exit", res.Run.ExitCode, "llm_calls", len(res.Audit), "blocked", len(res.Policy.Blocked))
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("sandbox: session %s: %w", req.RunID, err)
	}
	return res, nil
}
