package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// The agent I/O contract: where a run's messages appear and how its model is passed.
// These are the defaults; WithMessagesFile and WithModelEnv change them.
const (
	// DefaultMessagesFile is the messages file, relative to the workspace.
	DefaultMessagesFile = ".cogni/messages.json"
	// DefaultModelEnv is the environment variable that carries Request.Model.
	DefaultModelEnv = "COGNI_MODEL"

	maxMessages = 8 << 20
)

// ErrNotPermitted reports a run without a system grant that allows sandboxes, or
// (with Request.RequireAttestation) a run whose proxy refused its LLM calls
// because its sandbox did not attest the required isolation.
var ErrNotPermitted = errors.New("not permitted")

// Sandbox runs agents end to end. It is safe for concurrent use.
type Sandbox struct {
	runner       port.SandboxRunner
	llm          *LLM
	reconciler   port.SpendReconciler
	logger       *slog.Logger
	messagesFile string
	modelEnv     string
	egress       *egressConfig // WithEgress
	// reconcileTimeout bounds a reconciliation (WithReconcileTimeout).
	reconcileTimeout time.Duration
	noWorkspaceCheck bool
	// reconcileTimeoutSet and modelEnvSet: the options were given (checkOptions).
	reconcileTimeoutSet, modelEnvSet bool
	relay                            port.RepoRelay
	prs                              port.PullRequester
	pools                            []port.Pool // WithPool
	// Telemetry (telemetry.go): the providers set by options, and what New made of them.
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	tel     *telemetry.T
	runtime string
	// open is what Open chose and made (open.go); nil for a Sandbox made by New.
	open *openConfig
}

// runnerFor returns the pool whose template is spec's shape (WithPool), else the
// runner: a pool serves its shape warm when it has a sandbox ready, cold otherwise.
func (s *Sandbox) runnerFor(spec port.RunSpec) port.SandboxRunner {
	t := port.TemplateOf(spec)
	for _, p := range s.pools {
		if p.Template().Equal(t) {
			return p
		}
	}
	return s.runner
}

// DefaultReconcileTimeout bounds a run's reconciliation unless WithReconcileTimeout
// says otherwise: long enough for LiteLLM's batch writes (every 10 to 60 s).
const DefaultReconcileTimeout = 3 * time.Minute

// New returns a Sandbox running agents on runner, with exactly the parts the
// options give: the full-control path, where the host builds the runner, the proxy
// manager, the LiteLLM key and the reconciler itself, and every Request names its
// RunID and WorkspaceDir. Open makes all of them for the host instead. New does no
// I/O; Close releases nothing New was given.
func New(runner port.SandboxRunner, opts ...Option) (*Sandbox, error) {
	if runner == nil {
		return nil, port.Invalidf("runner is nil")
	}
	s := newSandbox(runner)
	if err := s.apply(opts); err != nil {
		return nil, err
	}
	if err := s.checkOptions(s.llm != nil, s.reconciler != nil); err != nil {
		return nil, err
	}
	s.init()
	return s, nil
}

// newSandbox is a Sandbox on runner with the defaults of every option.
func newSandbox(runner port.SandboxRunner) *Sandbox {
	return &Sandbox{
		runner: runner, logger: slog.New(slog.DiscardHandler),
		messagesFile: DefaultMessagesFile, modelEnv: DefaultModelEnv,
		reconcileTimeout: DefaultReconcileTimeout,
	}
}

func (s *Sandbox) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}

// init finishes a Sandbox whose options are applied and its parts in place.
func (s *Sandbox) init() {
	s.logger = s.logger.With(logattr.Component, "sandbox")
	s.tel, s.runtime = telemetry.New(s.tp, s.mp), runtimeOf(s.runner)
}

// Grant is the system execution grant a run needs. Sandboxes are never user-invocable:
// the host's own policy decides to set AllowSandbox.
type Grant struct {
	AllowSandbox bool
}

// Message is one chat message handed to the agent.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one agent run.
type Request struct {
	// Grant must allow sandboxes.
	Grant Grant
	// RunID is host-generated (port.ValidateRunID); Attempt numbers retries.
	RunID   string
	Attempt int
	// Image and Argv are the agent. A non-empty Argv replaces the image's ENTRYPOINT
	// and CMD (Argv[0] is the program); an empty one runs the image's own.
	Image string
	Argv  []string
	// Preload asks for a sandbox whose agent runtime was pre-booted (port.Preload):
	// served by a pool given with WithPool whose template matches, else cold;
	// Result.Run.Start says which.
	Preload *port.Preload
	// Env is the agent's environment, set over the image's. The library's own
	// variables win over a variable of the same name here: the model variable
	// (Model), HOSTNAME, and with LLM access the SDK variables of port.LLMEnv
	// (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ...).
	Env map[string]string
	// WorkspaceDir is an existing host directory, mounted at /workspace; the messages
	// are written to the messages file in it (DefaultMessagesFile unless
	// WithMessagesFile says otherwise). The sandbox user (User, uid 1001 by default)
	// must be able to enter, read and write it: NewWorkspace makes one that is, and
	// Run refuses one that is not with a *WorkspaceError.
	WorkspaceDir string
	Messages     []Message
	// Mounts are extra host directories, read-only unless marked writable: an agent
	// runtime installed on the host (OpenClaw's package tree, say), reference data.
	Mounts []port.Mount
	// Model is passed to the agent in the model variable (DefaultModelEnv unless
	// WithModelEnv says otherwise).
	Model string
	// Attribution says who pays for the run's LLM calls (required with LLM access).
	Attribution port.Attribution
	// Budget caps the run's LLM calls. A call over it is refused by the proxy (HTTP
	// 429 to the agent) and listed in Result.Policy; FailOnBudget also makes it an
	// error.
	Budget port.Budget
	// FailOnBudget makes a run whose proxy refused a call for its budget return an
	// error wrapping port.ErrBudgetExceeded, with the full result. Without it the
	// agent decides what a refused call means, and Result.Policy tells the host.
	FailOnBudget bool
	// FailOnUpstream makes a run with LLM calls the upstream did not answer
	// (Result.Policy.UpstreamFailures: LiteLLM unreachable, a 5xx, an answer cut
	// short) return an error wrapping port.ErrUnavailable, with the full result.
	FailOnUpstream bool
	// RequireAttestation gives the run no LLM access until its sandbox attested the
	// promised isolation from inside (see port.Attestation); the proxy must be able
	// to receive attestations (the in-process one and the shared daemon can). The
	// proxy takes one report, and only with the run's attestation key
	// (port.LLMSocket.AttestKey), which the runner hands to its own bridge alone:
	// no process of the sandbox's, not even one that ran before the bridge (a warm
	// pool's pre-booted runtime), can report for it. With OwnBridge the image's
	// bridge would report (the agent could attest for itself), so Run refuses
	// RequireAttestation with OwnBridge (port.ErrInvalidSpec) rather than give it
	// an attestation the agent can forge.
	RequireAttestation bool
	// Limits bound the sandbox (defaults from port.RunSpec).
	Limits port.Limits
	// User is the sandbox's "uid:gid" (default port.DefaultUser, "1001:1001"); root
	// is refused.
	User string
	// Network is the sandbox's network: none (the default, loopback only) or a
	// pre-existing internal network where the runner supports one.
	Network port.NetworkMode
	// OutputLimit caps each of stdout and stderr (default port.DefaultOutputLimit).
	OutputLimit int
	// Labels are extra labels on the sandbox's container, for the host's own
	// bookkeeping; the dev.agentsandbox. prefix is reserved.
	Labels map[string]string
	// OwnBridge says the image brings its own bridge to the LLM socket (see
	// port.RunSpec.OwnBridge); without it a runner with no bridge refuses LLM runs.
	OwnBridge bool
	// Stdout and Stderr, if set, receive the agent's output while it runs, capped
	// like the result's (see port.RunSpec.Stdout): for progress or logs. They are
	// written from other goroutines; Result.Run still has all of it at the end.
	Stdout, Stderr io.Writer
	// Reconcile asks for the run's usage from the reconciler after the run, on every
	// path (a failed, timed-out or cancelled run's calls are billed too), with a fresh
	// context bounded by WithReconcileTimeout. Run waits for it and fills Result.Usage.
	Reconcile bool
	// Egress, if set, gives the run allowlisted web access (see WithEgress).
	Egress *port.EgressPolicy
	// Repo, if set, clones a repository into the (empty) workspace before the run and
	// pushes the agent's commits to a branch after it (WithRepoRelay); see RepoRequest
	// for what happens when the run fails.
	Repo *RepoRequest
	// ReconcileAsync reconciles as Reconcile does, but in the background: Run returns
	// as soon as the run is over, and Result.Reconciling delivers the usage when
	// LiteLLM has written it (real LiteLLM writes spend rows every 10 to 60 s).
	ReconcileAsync bool
}

// Result is the outcome of a run.
type Result struct {
	// RunID is the run's ID: the Request's, or the one an Open-made Sandbox
	// generated for it.
	RunID string
	// Run is the sandbox's outcome: exit code, raw stdout and stderr, error code.
	// Structured output is the agent's own business: parse an OpenClaw run with
	// openclaw.ParseRun, for instance.
	Run *port.RunResult
	// Text is the agent's stdout as text, without surrounding white space.
	Text string
	// Audit is the proxy's record of every LLM call, also after a failed run.
	Audit []port.AuditRecord
	// Policy says what the proxy refused: budget, routes, bodies.
	Policy Policy
	// Usage is the reconciled usage, when Reconcile asked for it.
	Usage *port.Reconciliation
	// Reconciling delivers the usage when ReconcileAsync asked for it; nil otherwise.
	Reconciling *Reconciling
	// Attestation is what the sandbox's bridge observed about its own isolation,
	// when the proxy can receive it (port.Attester); judge it with Violations.
	Attestation *port.Attestation
	// Egress is the proxy's record of every egress request (port.EgressAuditor),
	// bounded as EgressSummary says: requests with credentials and forwarded ones are
	// kept, refusals from the start and the most recent ones.
	Egress []port.EgressRecord
	// EgressSummary counts the egress records written and those summarised away, per
	// guard (port.EgressSummarizer); nil when the proxy keeps no such count.
	EgressSummary *port.EgressSummary
	// Repo is what became of Request.Repo: the checkout, the exported commits, the
	// pushed branch and the pull request.
	Repo *RepoResult
	// Segments are the session's sandboxes so far, this one last, each with its run
	// ID, audit and usage (see Session.Hibernate): set by a session's Stop or
	// Hibernate and by RunFrom.
	Segments []Segment
}

// Policy is what the run's proxy refused, from its audit.
type Policy struct {
	// Blocked are the audit records of the calls the proxy refused itself, each with
	// its rule (AuditRecord.Blocked, e.g. "budget_exceeded: max_calls") and the model
	// the call asked for, when its body named one.
	Blocked []port.AuditRecord
	// BudgetExceeded is set when at least one call was refused for the run's budget.
	BudgetExceeded bool
	// AttestationRefused is set when at least one call was refused because the
	// run's sandbox had not attested its isolation, or attested a violation
	// (Request.RequireAttestation): then Run also returns an error wrapping
	// ErrNotPermitted.
	AttestationRefused bool
	// UpstreamFailures are the records of forwarded calls the upstream did not
	// answer properly: unreachable, an answer cut short, or a 5xx status. The
	// agent saw an error; FailOnUpstream makes it the run's too.
	UpstreamFailures []port.AuditRecord
}

// budgetBlocked is the prefix of AuditRecord.Blocked for budget refusals.
const budgetBlocked = "budget_exceeded"

func policyOf(audit []port.AuditRecord) Policy {
	var p Policy
	for _, a := range audit {
		if a.Blocked == "" {
			continue
		}
		p.Blocked = append(p.Blocked, a)
		if strings.HasPrefix(a.Blocked, budgetBlocked) {
			p.BudgetExceeded = true
		}
		if strings.HasPrefix(a.Blocked, attestationBlocked) {
			p.AttestationRefused = true
		}
	}
	for _, a := range audit {
		if a.Blocked == "" && (a.Status >= 500 || strings.HasPrefix(a.Error, "upstream")) {
			p.UpstreamFailures = append(p.UpstreamFailures, a)
		}
	}
	return p
}

// attestationBlocked is the prefix of AuditRecord.Blocked for calls refused for
// a missing or failed attestation.
const attestationBlocked = "attestation_"

// upstreamError describes p's upstream failures as an error wrapping
// port.ErrUnavailable.
func upstreamError(p Policy) error {
	first := p.UpstreamFailures[0]
	return fmt.Errorf("%w: %d LLM call(s) failed at the upstream, the first %s %s: status %d %s",
		port.ErrUnavailable, len(p.UpstreamFailures), first.Method, first.Path, first.Status, first.Error)
}

// budgetError describes the budget refusals of p as an error wrapping
// port.ErrBudgetExceeded.
func budgetError(p Policy) error {
	var n int
	var first port.AuditRecord
	for _, a := range p.Blocked {
		if strings.HasPrefix(a.Blocked, budgetBlocked) {
			if n == 0 {
				first = a
			}
			n++
		}
	}
	return fmt.Errorf("%w: the proxy refused %d call(s), the first %s %s for model %q (%s)",
		port.ErrBudgetExceeded, n, first.Method, first.Path, first.Model, first.Blocked)
}

// Reconciling is a reconciliation running in the background (Request.ReconcileAsync).
type Reconciling struct {
	done  chan struct{}
	usage *port.Reconciliation
	err   error
}

// Done is closed when the reconciliation has finished.
func (r *Reconciling) Done() <-chan struct{} { return r.done }

// Wait waits for the reconciliation, or for ctx to end, and returns its outcome:
// the usage found (also with an error, when calls are missing) and the reconciler's
// error, wrapping port.ErrUnattributed when LiteLLM had no row for some call by the
// end of WithReconcileTimeout. Ending ctx stops the wait, not the reconciliation.
func (r *Reconciling) Wait(ctx context.Context) (*port.Reconciliation, error) {
	select {
	case <-r.done:
		return r.usage, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run executes req end to end and returns its result. The result is non-nil whenever
// the sandbox ran, also with an error (a timeout, say, or a reconciliation that found
// calls missing). Errors: ErrNotPermitted without the grant, or for calls refused for
// a missing or failed attestation; port.ErrUnavailable with FailOnUpstream; port.ErrInvalidSpec for bad
// input (nothing is started), port.ErrUnsupported for what the runner or the proxy
// manager declares it cannot do (port.RunnerCapable, port.ProxyCapable; nothing is
// cloned, written or started), a *WorkspaceError for a workspace the sandbox user
// cannot use; port.ErrBudgetExceeded with FailOnBudget; the relay's errors with Repo
// (port.ErrRejected, a *port.PushError naming the artefact); the runner's, proxy's and
// reconciler's errors otherwise, joined when several apply.
func (s *Sandbox) Run(ctx context.Context, req Request) (res *Result, err error) {
	defer func() { err = withHint(err) }()
	req, done, err := s.withDefaults(req)
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, span := s.startRun(ctx, req)
	defer func(start time.Time) { s.endRun(ctx, span, start, res, err) }(time.Now())
	spec, pspec, err := s.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	if res, err = s.walk(ctx, req, spec, pspec); err != nil {
		return res, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	return res, nil
}

// walk is a prepared run's way: the repository cloned, the messages written, the
// sandbox run (behind its proxy), then the run finished (audit, reconciliation,
// export). Nothing ran when it returns no result. Run names the run in its error.
func (s *Sandbox) walk(ctx context.Context, req Request, spec port.RunSpec, pspec port.ProxySpec) (*Result, error) {
	repo, err := s.clone(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := writeMessages(req.WorkspaceDir, s.messagesFile, req.Messages); err != nil {
		return nil, err
	}
	log := s.logger.With(logattr.RunID, req.RunID, logattr.Attempt, req.Attempt)
	res := &Result{RunID: req.RunID, Repo: repo}
	started := time.Now()
	var runErr error
	if s.llm != nil {
		// The proxy ends itself a grace after the sandbox's own deadline, should this
		// process die before stopping it.
		pspec.Deadline = time.Now().Add(spec.WithDefaults().Limits.Timeout + proxyDeadlineGrace)
		if runErr, err = s.runWithProxy(ctx, spec, pspec, res, log); err != nil {
			return nil, fmt.Errorf("starting proxy: %w", err)
		}
	} else {
		res.Run, runErr = s.runOnce(ctx, spec)
	}
	if res.Run == nil {
		if runErr == nil {
			runErr = fmt.Errorf("%w: runner returned no result", port.ErrInternal)
		}
		// Nothing ran, so nothing was billed: there is nothing to reconcile.
		return nil, runErr
	}
	return res, s.finish(ctx, req, res, runErr, started, log)
}

// agentEnv is the environment req asks for the agent: a copy of req.Env, with the
// model under the sandbox's model variable when req names one.
func (s *Sandbox) agentEnv(req Request) map[string]string {
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	if req.Model != "" {
		env[s.modelEnv] = req.Model
	}
	return env
}

// checkSelfAttestation refuses RequireAttestation with OwnBridge (checkRequest, for
// Run and Start):
// the image's own bridge, not the runner's, would report, so the agent could
// attest for itself.
func checkSelfAttestation(req Request) error {
	if req.RequireAttestation && req.OwnBridge {
		return port.Invalidf("RequireAttestation with OwnBridge: the image's own bridge, not the runner's, would report the attestation, so the agent could attest for itself")
	}
	return nil
}

// prepare checks req and turns it into the runner's and the proxy's specs; it has
// no side effects, so whatever it refuses leaves nothing behind. Its errors are
// Run's, already wrapped.
func (s *Sandbox) prepare(ctx context.Context, req Request) (port.RunSpec, port.ProxySpec, error) {
	var spec port.RunSpec
	var pspec port.ProxySpec
	if !req.Grant.AllowSandbox {
		return spec, pspec, fmt.Errorf("sandbox: run %q: %w: the system grant does not allow sandboxes", req.RunID, ErrNotPermitted)
	}
	if err := port.ValidateRunID(req.RunID); err != nil {
		return spec, pspec, fmt.Errorf("sandbox: %w%s", err, s.runIDHint(req.RunID))
	}
	wrap := func(err error) (port.RunSpec, port.ProxySpec, error) {
		return spec, pspec, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	if err := s.checkRequest(req, false); err != nil {
		return wrap(err)
	}
	egressPolicy, err := s.egressPolicy(req)
	if err != nil {
		return wrap(err)
	}
	s.traceEgress(ctx, egressPolicy)
	spec = port.RunSpec{
		RunID: req.RunID, Image: req.Image, Argv: req.Argv, Env: s.agentEnv(req),
		WorkspaceDir: req.WorkspaceDir, Mounts: req.Mounts, Limits: req.Limits,
		User: req.User, Network: req.Network, OutputLimit: req.OutputLimit, Labels: req.Labels,
		OwnBridge: req.OwnBridge, Stdout: req.Stdout, Stderr: req.Stderr, Preload: req.Preload,
	}
	if err := checkSpec(spec.WithDefaults().Validate(), spec, "Request", "run"); err != nil {
		return wrap(err)
	}
	pspec = s.proxySpec(req, egressPolicy)
	// What the adapters declare they cannot do is refused before any side effect
	// (no clone, no file written, no proxy started).
	if err := s.checkCapabilities(spec, pspec); err != nil {
		return wrap(err)
	}
	if err := s.checkRepo(req); err != nil {
		return wrap(err)
	}
	if err := s.traced(ctx, "sandbox.workspace.check", func(context.Context) error {
		return s.checkWorkspace(req.WorkspaceDir, spec.WithDefaults().User)
	}); err != nil {
		return wrap(err)
	}
	if s.llm != nil {
		if pspec.APIKey, err = s.proxyKey(ctx, spec.WithDefaults().Limits.Timeout); err != nil {
			return wrap(err)
		}
	}
	return spec, pspec, nil
}

// runWithProxy starts the run's proxy, runs the sandbox on its socket and stops
// the proxy, filling res (Run, Audit, Attestation, Egress). err is the proxy's
// start failure (nothing ran); runErr the run's and the proxy stop's errors.
func (s *Sandbox) runWithProxy(ctx context.Context, spec port.RunSpec, pspec port.ProxySpec, res *Result, log *slog.Logger) (runErr, err error) {
	var proxy port.Proxy
	run := trace.SpanFromContext(ctx)
	err = s.traced(ctx, "sandbox.proxy.start", func(pctx context.Context) (err error) {
		// The proxy takes its calls' parent span from ctx: the run's, not this one.
		proxy, err = s.llm.Proxy.Start(trace.ContextWithSpan(pctx, run), pspec)
		return err
	})
	if err != nil {
		return nil, err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		sctx, sspan := s.tel.Tracer.Start(sctx, "sandbox.proxy.stop")
		audit, err := proxy.Stop(sctx)
		telemetry.End(sspan, err)
		res.Audit = audit
		if a, ok := proxy.(port.Attester); ok {
			res.Attestation = withRuntime(a.Attestation(), s.runner)
		}
		if a, ok := proxy.(port.EgressAuditor); ok {
			res.Egress = a.EgressAudit()
		}
		if a, ok := proxy.(port.EgressSummarizer); ok && pspec.Egress != nil {
			sum := a.EgressSummary()
			res.EgressSummary = &sum
		}
		return err
	}
	// A panic in the runner must not leave the proxy (and its key) behind.
	defer func() { _ = stop() }()
	sock := proxy.Socket()
	spec.LLM = &sock
	res.Run, runErr = s.runOnce(ctx, spec)
	if serr := stop(); serr != nil {
		log.Warn("stopping proxy failed", logattr.Err, serr)
		runErr = errors.Join(runErr, fmt.Errorf("stopping proxy: %w", serr))
	}
	return runErr, nil
}

// finish is the stage after a run that produced a result: the text, the policy,
// the budget error (FailOnBudget), reconciliation and the repository's push. It
// returns runErr joined with whatever of these failed.
func (s *Sandbox) finish(ctx context.Context, req Request, res *Result, runErr error, started time.Time, log *slog.Logger) error {
	res.Text = strings.TrimSpace(string(res.Run.Stdout))
	res.Policy = policyOf(res.Audit)
	errs := []error{runErr}
	if req.FailOnBudget && res.Policy.BudgetExceeded {
		errs = append(errs, budgetError(res.Policy))
	}
	if req.RequireAttestation && res.Policy.AttestationRefused {
		errs = append(errs, fmt.Errorf("%w: the proxy refused the run's LLM calls: its sandbox did not attest the required isolation", ErrNotPermitted))
	}
	if req.FailOnUpstream && len(res.Policy.UpstreamFailures) > 0 {
		errs = append(errs, upstreamError(res.Policy))
	}
	errs = append(errs, s.reconcileInto(ctx, req, res, started, log))
	if res.Repo != nil {
		errs = append(errs, s.traced(ctx, "sandbox.repo.export_push", func(ctx context.Context) error {
			return s.finishRepo(ctx, req, res.Run, res.Repo)
		}))
	}
	log.Info("run finished", "exit", res.Run.ExitCode, "llm_calls", len(res.Audit), "blocked", len(res.Policy.Blocked))
	return errors.Join(errs...)
}

// checkSpec refuses a spec that did not validate (valid is its error), a request
// without a workspace (kind names the request's type, per what Open makes one per)
// and missing host directories: bad input, refused before a proxy holds the key.
func checkSpec(valid error, rs port.RunSpec, kind, per string) error {
	if valid != nil {
		return valid
	}
	if rs.WorkspaceDir == "" {
		return port.Invalidf("%s.WorkspaceDir is required (sandbox.NewWorkspace makes one; a Sandbox made by Open makes one per %s)", kind, per)
	}
	return rs.CheckHostPaths()
}

// proxySpec is the LLM proxy's spec for req's run (zero without an LLM).
func (s *Sandbox) proxySpec(req Request, egress *port.EgressPolicy) port.ProxySpec {
	if s.llm == nil {
		return port.ProxySpec{}
	}
	return port.ProxySpec{
		RunID: req.RunID, Attempt: req.Attempt, Upstream: s.llm.Upstream,
		Attribution: req.Attribution, Budget: req.Budget, RequireAttestation: req.RequireAttestation,
		Egress: egress,
	}
}

// reconcileInto reconciles res's audited calls with the billing system when req
// asks: in the background (res.Reconciling) or now (res.Usage, and its error).
func (s *Sandbox) reconcileInto(ctx context.Context, req Request, res *Result, since time.Time, log *slog.Logger) error {
	if !req.Reconcile && !req.ReconcileAsync {
		return nil
	}
	rreq := port.ReconcileRequest{
		RunID: req.RunID, Attempt: req.Attempt, BillingAccountID: req.Attribution.BillingAccountID,
		Since: since, Until: time.Now(), Calls: res.Audit,
	}
	if req.ReconcileAsync {
		res.Reconciling = s.reconcileAsync(ctx, rreq, log)
		return nil
	}
	usage, err := s.reconcile(ctx, rreq)
	res.Usage = usage
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	return nil
}

// checkCapabilities refuses, with port.ErrUnsupported, a run the runner or the
// proxy manager declares it cannot serve (port.RunnerCapable, port.ProxyCapable).
func (s *Sandbox) checkCapabilities(spec port.RunSpec, pspec port.ProxySpec) error {
	if err := port.CheckRunner(s.runner, spec.WithDefaults()); err != nil {
		return err
	}
	if s.llm != nil {
		return port.CheckProxy(s.llm.Proxy, pspec)
	}
	return nil
}

func (s *Sandbox) checkWorkspace(dir, user string) error {
	if s.noWorkspaceCheck {
		return nil
	}
	return CheckWorkspace(dir, user)
}

// reconcile runs the reconciler with a fresh context, so a cancelled or timed-out run
// is billed too, bounded by the reconcile timeout.
func (s *Sandbox) reconcile(ctx context.Context, req port.ReconcileRequest) (*port.Reconciliation, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.reconcileTimeout)
	defer cancel()
	rctx, span := s.tel.Tracer.Start(rctx, "sandbox.reconcile", trace.WithAttributes(attribute.Int("sandbox.reconcile.audited", len(req.Calls))))
	usage, err := s.reconciler.Reconcile(rctx, req)
	if usage != nil {
		found := usage.Total.Calls
		span.SetAttributes(attribute.Int("sandbox.reconcile.found", found), attribute.Int("sandbox.reconcile.missing", len(usage.Missing)))
		s.tel.Reconciled(rctx, found, len(usage.Missing))
	}
	telemetry.End(span, err)
	return usage, err
}

// runOnce runs the sandbox in a span of its own; the runner adds its create, start
// and wait (or pool claim) as children.
func (s *Sandbox) runOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	ctx, span := s.tel.Tracer.Start(ctx, "sandbox.run_once", trace.WithAttributes(telemetry.Runtime.String(s.runtime)))
	res, err := s.runnerFor(spec).RunOnce(ctx, spec)
	if res != nil {
		span.SetAttributes(attribute.Int("sandbox.exit_code", res.ExitCode))
		if err == nil && res.ErrorCode != "" {
			span.SetStatus(codes.Error, string(res.ErrorCode))
		}
	}
	telemetry.End(span, err)
	return res, err
}

func (s *Sandbox) reconcileAsync(ctx context.Context, req port.ReconcileRequest, log *slog.Logger) *Reconciling {
	r := &Reconciling{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer func() {
			// A reconciler's panic must not take the host down from a goroutine no
			// caller can recover in.
			if v := recover(); v != nil {
				r.err = fmt.Errorf("sandbox: run %s: reconcile: %w: panic: %v", req.RunID, port.ErrInternal, v)
			}
		}()
		r.usage, r.err = s.reconcile(ctx, req)
		if r.err != nil {
			r.err = withHint(fmt.Errorf("sandbox: run %s: reconcile: %w", req.RunID, r.err))
			log.Warn("reconciliation failed", logattr.Err, r.err)
		}
	}()
	return r
}

// writeMessages writes the messages file inside the workspace without following
// symlinks out of it (an earlier run could have planted one).
func writeMessages(workspace, file string, msgs []Message) error {
	if msgs == nil {
		msgs = []Message{}
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return port.Invalidf("messages: %v", err)
	}
	if len(b) > maxMessages {
		return port.Invalidf("messages are %d bytes, over the limit of %d", len(b), maxMessages)
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return port.Invalidf("workspace: %v", err)
	}
	defer root.Close()
	if dir := path.Dir(file); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	_ = root.Remove(file)
	return root.WriteFile(file, b, 0o644)
}

// withRuntime returns a copy of a that records the OCI runtime the runner chose (the
// host's word, replacing anything the sandbox sent), so Violations checks it against
// the kernel the bridge saw inside.
func withRuntime(a *port.Attestation, runner port.SandboxRunner) *port.Attestation {
	if a == nil {
		return nil
	}
	c := *a
	c.Runtime = ""
	if rr, ok := runner.(port.RuntimeReporter); ok {
		c.Runtime = rr.Runtime()
	}
	return &c
}

// proxyDeadlineGrace is how long a run's proxy outlives the run's time limit when
// the host never stops it (see port.ProxySpec.Deadline).
const proxyDeadlineGrace = time.Minute
