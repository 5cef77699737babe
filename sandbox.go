package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
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

// ErrNotPermitted reports a run without a system grant that allows sandboxes.
var ErrNotPermitted = errors.New("not permitted")

// Sandbox runs agents end to end. It is safe for concurrent use.
type Sandbox struct {
	runner       port.SandboxRunner
	llm          *LLM
	reconciler   port.SpendReconciler
	logger       *slog.Logger
	messagesFile string
	modelEnv     string
}

// New returns a Sandbox running agents on runner. It does no I/O.
func New(runner port.SandboxRunner, opts ...Option) (*Sandbox, error) {
	if runner == nil {
		return nil, port.Invalidf("runner is nil")
	}
	s := &Sandbox{
		runner: runner, logger: slog.New(slog.DiscardHandler),
		messagesFile: DefaultMessagesFile, modelEnv: DefaultModelEnv,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.logger = s.logger.With(logattr.Component, "sandbox")
	return s, nil
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
	// Image and Argv are the agent; Env its environment.
	Image string
	Argv  []string
	Env   map[string]string
	// WorkspaceDir is an existing host directory, mounted at /workspace; the messages
	// are written to the messages file in it (DefaultMessagesFile unless
	// WithMessagesFile says otherwise). The sandbox user (uid 1001 by default) must be
	// able to enter it, and to write in it if the agent writes.
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
	// Budget caps the run's LLM calls.
	Budget port.Budget
	// RequireAttestation gives the run no LLM access until its sandbox attested the
	// promised isolation from inside (see port.Attestation); the proxy must be able
	// to receive attestations (the in-process one can).
	RequireAttestation bool
	// Limits bound the sandbox (defaults from port.RunSpec).
	Limits port.Limits
	// Reconcile asks for the run's usage from the reconciler after the run.
	Reconcile bool
}

// Result is the outcome of a run.
type Result struct {
	// Run is the sandbox's outcome: exit code, raw stdout and stderr, error code.
	// Structured output is the agent's own business: parse an OpenClaw run with
	// openclaw.ParseRun, for instance.
	Run *port.RunResult
	// Text is the agent's stdout as text, without surrounding white space.
	Text string
	// Audit is the proxy's record of every LLM call, also after a failed run.
	Audit []port.AuditRecord
	// Usage is the reconciled usage, when asked for.
	Usage *port.Reconciliation
	// Attestation is what the sandbox's bridge observed about its own isolation,
	// when the proxy can receive it (port.Attester); judge it with Violations.
	Attestation *port.Attestation
}

// Run executes req end to end and returns its result. The result is non-nil whenever
// the sandbox ran, also with an error (a timeout, say, or a reconciliation that found
// calls missing). Errors: ErrNotPermitted without the grant; port.ErrInvalidSpec for bad
// input (nothing is started); the runner's, proxy's and reconciler's errors otherwise.
func (s *Sandbox) Run(ctx context.Context, req Request) (res *Result, err error) {
	if !req.Grant.AllowSandbox {
		return nil, fmt.Errorf("sandbox: run %q: %w: the system grant does not allow sandboxes", req.RunID, ErrNotPermitted)
	}
	if err := port.ValidateRunID(req.RunID); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if req.Reconcile && (s.reconciler == nil || s.llm == nil) {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, port.Invalidf("reconcile asked for, but no reconciler or LLM access is configured"))
	}
	spec := port.RunSpec{
		RunID: req.RunID, Image: req.Image, Argv: req.Argv, Env: map[string]string{},
		WorkspaceDir: req.WorkspaceDir, Mounts: req.Mounts, Limits: req.Limits,
	}
	for k, v := range req.Env {
		spec.Env[k] = v
	}
	if req.Model != "" {
		spec.Env[s.modelEnv] = req.Model
	}
	if err := spec.WithDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	if req.WorkspaceDir == "" {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, port.Invalidf("workspace dir is required"))
	}
	// Missing host directories are bad input: refuse them before a proxy holds the key.
	if err := spec.CheckHostPaths(); err != nil {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	if err := writeMessages(req.WorkspaceDir, s.messagesFile, req.Messages); err != nil {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	log := s.logger.With(logattr.RunID, req.RunID, logattr.Attempt, req.Attempt)
	res = &Result{}
	started := time.Now()

	if s.llm != nil {
		proxy, err := s.llm.Proxy.Start(ctx, port.ProxySpec{
			RunID: req.RunID, Attempt: req.Attempt, Upstream: s.llm.Upstream, APIKey: s.llm.APIKey,
			Attribution: req.Attribution, Budget: req.Budget, RequireAttestation: req.RequireAttestation,
		})
		if err != nil {
			return nil, fmt.Errorf("sandbox: run %s: starting proxy: %w", req.RunID, err)
		}
		stopped := false
		stop := func() error {
			if stopped {
				return nil
			}
			stopped = true
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			audit, err := proxy.Stop(sctx)
			res.Audit = audit
			if a, ok := proxy.(port.Attester); ok {
				res.Attestation = withRuntime(a.Attestation(), s.runner)
			}
			return err
		}
		// A panic or early return must not leave the proxy (and its key) behind.
		defer func() {
			if serr := stop(); serr != nil && err == nil {
				err = fmt.Errorf("sandbox: run %s: stopping proxy: %w", req.RunID, serr)
			}
		}()
		sock := proxy.Socket()
		spec.LLM = &sock
		run, runErr := s.runner.RunOnce(ctx, spec)
		res.Run = run
		if serr := stop(); serr != nil {
			log.Warn("stopping proxy failed", logattr.Err, serr)
			runErr = errors.Join(runErr, fmt.Errorf("stopping proxy: %w", serr))
		}
		if runErr != nil {
			return s.finish(res, req, runErr)
		}
	} else {
		run, runErr := s.runner.RunOnce(ctx, spec)
		res.Run = run
		if runErr != nil {
			return s.finish(res, req, runErr)
		}
	}
	if res.Run == nil {
		return nil, fmt.Errorf("sandbox: run %s: %w: runner returned no result", req.RunID, port.ErrInternal)
	}
	res.Text = strings.TrimSpace(string(res.Run.Stdout))
	if req.Reconcile {
		usage, rerr := s.reconciler.Reconcile(ctx, port.ReconcileRequest{
			RunID: req.RunID, Attempt: req.Attempt, BillingAccountID: req.Attribution.BillingAccountID,
			Since: started, Until: time.Now(), Calls: res.Audit,
		})
		res.Usage = usage
		if rerr != nil {
			return res, fmt.Errorf("sandbox: run %s: reconcile: %w", req.RunID, rerr)
		}
	}
	log.Info("run finished", "exit", res.Run.ExitCode, "llm_calls", len(res.Audit))
	return res, nil
}

func (s *Sandbox) finish(res *Result, req Request, err error) (*Result, error) {
	if res.Run == nil {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	res.Text = strings.TrimSpace(string(res.Run.Stdout))
	return res, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
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
