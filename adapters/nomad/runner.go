package nomad

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/internal/runner/capture"
	"github.com/agentsandbox/sandbox/port"
)

// Runner runs sandboxes as Nomad batch jobs, one job per run, through Nomad's HTTP API.
// It is safe for concurrent use.
type Runner struct {
	cfg config
	api *api.Client

	mu      sync.Mutex
	proxies map[string]*Proxy // sidecar proxies started and not yet stopped, by token

	// observe, if set (by tests), sees each run's finished allocation.
	observe func(*api.Allocation)
}

var (
	_ port.SandboxRunner = (*Runner)(nil)
	_ port.Sweeper       = (*Runner)(nil)
	_ port.ProxyManager  = (*Runner)(nil)
)

// NewRunner returns a Runner. It does no I/O; use Ping to check the cluster.
func NewRunner(opts ...Option) (*Runner, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, opErr("NewRunner", "", err)
	}
	cli := cfg.client
	if cli == nil {
		ac := api.DefaultConfig()
		if cfg.address != "" {
			ac.Address = cfg.address
		}
		var err error
		if cli, err = api.NewClient(ac); err != nil {
			return nil, opErr("NewRunner", "", port.Invalidf("nomad client: %v", err))
		}
	}
	if cfg.token != "" {
		cli.SetSecretID(cfg.token)
	}
	if cfg.namespace != "" {
		cli.SetNamespace(cfg.namespace)
	}
	if cfg.region != "" {
		cli.SetRegion(cfg.region)
	}
	cfg.logger = cfg.logger.With(logattr.Component, "nomad.runner")
	return &Runner{cfg: cfg, api: cli, proxies: map[string]*Proxy{}}, nil
}

// Ping checks that the cluster has a leader. Errors wrap port.ErrUnavailable.
func (r *Runner) Ping(ctx context.Context) error {
	if _, err := r.api.Status().Leader(); err != nil {
		return opErr("Ping", "", fmt.Errorf("%w: %w", port.ErrUnavailable, err))
	}
	return ctx.Err()
}

// Owner returns the owner recorded in the meta of the jobs this runner submits.
func (r *Runner) Owner() string { return r.cfg.owner }

// Client returns the runner's Nomad API client.
func (r *Runner) Client() *api.Client { return r.api }

// RunOnce implements port.SandboxRunner: it submits one batch job, waits for its
// allocation to finish, collects the sandbox's output through Nomad's log API and
// deregisters and purges the job on every path.
//
// Errors besides the port's: port.ErrUnsupported for what the docker driver cannot
// express here (an internal network, CPU limits in fractions of a core, host paths
// when WithHostPaths is off); a job the cluster cannot place (no eligible node with
// the resources) gives a *port.RunError with port.CodeContainerFailed.
func (r *Runner) RunOnce(ctx context.Context, spec port.RunSpec) (*port.RunResult, error) {
	return runner.Lifecycle(ctx, "nomad.RunOnce", spec, &oneShot{r: r})
}

// register stores the run's proxy config (its key, as a Nomad variable) when it has
// a sidecar, then registers the job and returns its evaluation. A registration the
// servers refused is a *registerError.
func (r *Runner) register(ctx context.Context, jobID string, job *api.Job, proxy *Proxy) (string, error) {
	if proxy != nil {
		if err := r.putProxyConfig(ctx, jobID, proxy); err != nil {
			return "", err
		}
	}
	reg, _, err := r.api.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return "", &registerError{fmt.Errorf("register job: %w", classify(err))}
	}
	return reg.EvalID, nil
}

// registerError is a job registration the servers did not take.
type registerError struct{ error }

func (e *registerError) Unwrap() error { return e.error }

// jobSpecOf is the job's identity for spec, with the packed workspace when it is
// copied (WithWorkspaceCopy).
func (r *Runner) jobSpecOf(spec port.RunSpec, proxy bool, start time.Time) (jobSpec, error) {
	js := jobSpec{id: jobID(spec.RunID), meta: meta(r.cfg.owner, spec.RunID, start), created: start, proxy: proxy}
	if spec.WorkspaceDir != "" && r.cfg.copyWorkspace {
		var err error
		if js.workspace, err = packWorkspace(spec.WorkspaceDir, MaxWorkspaceIn); err != nil {
			return js, err
		}
		js.copyWorkspace = true
	}
	return js, nil
}

// gather collects what a finished (or killed) allocation leaves: its output into
// res (outErr: the output could not be read), the end of its live output, the
// sidecar's audit, and the workspace copied back (copyErr).
func (r *Runner) gather(ctx context.Context, alloc *api.Allocation, spec port.RunSpec, js jobSpec, res *port.RunResult, proxy *Proxy, finishLive func(*port.RunResult)) (outErr, copyErr error) {
	if r.observe != nil {
		r.observe(alloc)
	}
	var exportMaxBytes int64
	if js.copyWorkspace {
		exportMaxBytes = exportMax(spec)
	}
	archive, exportErr, outErr := r.collect(ctx, alloc, spec.OutputLimit, exportMaxBytes, res)
	finishLive(res)
	if proxy != nil {
		proxy.collect(ctx, r, alloc)
	}
	if js.copyWorkspace {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
		defer cancel()
		copyErr = exportErr
		if copyErr == nil {
			var files tarFiles
			if files, copyErr = newTarFiles(archive); copyErr == nil {
				copyErr = copyBack(cctx, files, spec.WorkspaceDir, MaxWorkspaceOut, MaxWorkspaceFiles)
			}
		}
	}
	return outErr, copyErr
}

// terminatedExitCode is the agent task's exit code from its last Terminated
// event, or def when there is none.
func terminatedExitCode(alloc *api.Allocation, def int) int {
	if ts := alloc.TaskStates[agentTask]; ts != nil {
		for _, ev := range ts.Events {
			if ev.Type == api.TaskTerminated {
				def = ev.ExitCode
			}
		}
	}
	return def
}

// once returns f that runs only on its first call.
func once(f func(*port.RunResult)) func(*port.RunResult) {
	var o sync.Once
	return func(res *port.RunResult) { o.Do(func() { f(res) }) }
}

// check validates spec at the boundary: the port's rules, then what Nomad's docker
// driver can express here. It returns the run's sidecar proxy, if any.
func (r *Runner) check(spec port.RunSpec) (*Proxy, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := spec.CheckBridge(r.cfg.bridgePath != ""); err != nil {
		return nil, err
	}
	// A reference that is no image name is bad input here, as on the other runners,
	// not a driver failure after the job is placed.
	if _, err := reference.ParseNormalizedNamed(spec.Image); err != nil {
		return nil, port.Invalidf("image %q: %v", spec.Image, err)
	}
	if spec.Network.Internal != "" {
		return nil, fmt.Errorf("%w: nomad: internal networks (the sandbox always has none)", port.ErrUnsupported)
	}
	if n := spec.Limits.NanoCPUs; n > 0 && n%1e9 != 0 {
		return nil, fmt.Errorf("%w: nomad: a CPU limit of %v cores; only whole cores can be reserved", port.ErrUnsupported, float64(n)/1e9)
	}
	// Nomad expands ${...} in a task's environment and driver configuration: a value
	// must reach the agent verbatim or be refused, never changed silently.
	for k, v := range spec.Env {
		if interpolated(v) && r.cfg.initPath == "" {
			return nil, fmt.Errorf("%w: nomad: the value of %s contains ${, which Nomad would interpolate; WithInit passes such values verbatim", port.ErrUnsupported, k)
		}
	}
	for _, a := range spec.Argv {
		if interpolated(a) {
			return nil, fmt.Errorf("%w: nomad: an argument contains ${, which Nomad would interpolate; pass it in the environment (with WithInit)", port.ErrUnsupported)
		}
	}
	if len(spec.Argv) == 0 && (r.cfg.bridgePath != "" || r.cfg.initPath != "") {
		return nil, port.Invalidf("argv is empty: on Nomad the image's own command is not known to the host, so give the argv")
	}
	hostDir := spec.LLM != nil && spec.LLM.HostDir != ""
	copied := spec.WorkspaceDir != "" && r.cfg.copyWorkspace
	if copied && r.cfg.initPath == "" {
		return nil, port.Invalidf("WithWorkspaceCopy needs WithInit: the init unpacks the workspace on the node")
	}
	if copied {
		if err := spec.CheckHostPaths(); err != nil {
			return nil, err
		}
	}
	if (spec.WorkspaceDir != "" && !copied) || len(spec.Mounts) > 0 || hostDir {
		if !r.cfg.hostPaths {
			return nil, fmt.Errorf("%w: nomad: host paths (workspace, mounts, a host socket directory) with WithHostPaths(false)", port.ErrUnsupported)
		}
		if err := spec.CheckHostPaths(); err != nil {
			return nil, err
		}
	}
	if spec.LLM == nil || spec.LLM.Volume == "" {
		return nil, nil
	}
	r.mu.Lock()
	p := r.proxies[spec.LLM.Volume]
	r.mu.Unlock()
	if p == nil {
		return nil, port.Invalidf("llm socket volume %q is not a proxy of this runner (Runner.Start) or it was stopped", spec.LLM.Volume)
	}
	return p, nil
}

var errNotPlaced = errors.New("the cluster could not place the run")

// placed waits for the job's evaluation and returns the allocation it made.
func (r *Runner) placed(ctx context.Context, evalID string) (string, error) {
	var idx uint64
	for {
		ev, meta, err := r.api.Evaluations().Info(evalID, (&api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second}).WithContext(ctx))
		if err != nil {
			return "", fmt.Errorf("evaluation %s: %w", evalID, classify(err))
		}
		idx = meta.LastIndex
		switch ev.Status {
		case api.EvalStatusComplete:
			if len(ev.FailedTGAllocs) > 0 {
				return "", fmt.Errorf("%w: %s", errNotPlaced, placementFailure(ev.FailedTGAllocs))
			}
			allocs, _, err := r.api.Evaluations().Allocations(evalID, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return "", fmt.Errorf("allocations of %s: %w", evalID, classify(err))
			}
			if len(allocs) == 0 {
				return "", fmt.Errorf("%w: evaluation %s made no allocation", errNotPlaced, evalID)
			}
			return allocs[0].ID, nil
		case api.EvalStatusFailed, api.EvalStatusCancelled:
			return "", fmt.Errorf("%w: evaluation %s %s: %s", errNotPlaced, evalID, ev.Status, ev.StatusDescription)
		}
	}
}

func placementFailure(failed map[string]*api.AllocationMetric) string {
	var parts []string
	for _, m := range failed {
		parts = append(parts, fmt.Sprintf("%d nodes evaluated, %d filtered, %d exhausted %v %v", m.NodesEvaluated, m.NodesFiltered, m.NodesExhausted, m.DimensionExhausted, m.ConstraintFiltered))
	}
	return strings.Join(parts, "; ")
}

// finished waits (with blocking queries) until the allocation is terminal.
func (r *Runner) finished(ctx context.Context, allocID string) (*api.Allocation, error) {
	var idx uint64
	for {
		a, meta, err := r.api.Allocations().Info(allocID, (&api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("allocation %s: %w", allocID, classify(err))
		}
		idx = meta.LastIndex
		if lostStatus(a.ClientStatus) {
			return a, fmt.Errorf("%w: allocation %s on node %s is %s", ErrNodeLost, a.ID, a.NodeName, a.ClientStatus)
		}
		if a.ClientTerminalStatus() {
			return a, nil
		}
	}
}

// kill ends a run that outlived its limit: the kill signal to the sandbox task (the
// sidecar is then stopped by Nomad), or a stop of the allocation when the task is not
// running yet. With the init that is SIGTERM, which it answers by killing the
// sandbox's processes at once and exiting once its output is stored; SIGKILL follows
// if the task has not ended after killTimeout. It waits (bounded) for the allocation
// to finish and returns it, or nil.
func (r *Runner) kill(ctx context.Context, allocID string, copied bool, log interface{ Warn(string, ...any) }) *api.Allocation {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	stub := &api.Allocation{ID: allocID}
	a, _, err := r.api.Allocations().Info(allocID, (&api.QueryOptions{}).WithContext(kctx))
	if err == nil {
		stub = a
	}
	sig := r.killSignal()
	if err := r.api.Allocations().Signal(stub, (&api.QueryOptions{}).WithContext(kctx), agentTask, sig); err != nil {
		if _, err := r.api.Allocations().Stop(stub, (&api.QueryOptions{}).WithContext(kctx)); err != nil {
			log.Warn("stopping the allocation failed", logattr.Err, err)
		}
	} else if sig != "SIGKILL" {
		grace := killTimeout
		if copied {
			grace = exportKillTimeout // the init sends the workspace back first
		}
		gctx, gcancel := context.WithTimeout(kctx, grace)
		a, err := r.finished(gctx, allocID)
		gcancel()
		if err == nil {
			return a
		}
		if err := r.api.Allocations().Signal(stub, (&api.QueryOptions{}).WithContext(kctx), agentTask, "SIGKILL"); err != nil {
			log.Warn("killing the sandbox task failed", logattr.Err, err)
		}
	}
	a, err = r.finished(kctx, allocID)
	if err != nil {
		log.Warn("the allocation did not finish after the kill", logattr.Err, err)
		return nil
	}
	return a
}

// outcome classifies a finished allocation: the sandbox task's exit code, an OOM
// kill, or a failure to start it.
func (r *Runner) outcome(alloc *api.Allocation, spec port.RunSpec, res *port.RunResult) (port.ErrorCode, error) {
	ts := alloc.TaskStates[agentTask]
	if ts == nil {
		return port.CodeContainerFailed, fmt.Errorf("the sandbox task never started: %s", alloc.ClientDescription)
	}
	var term *api.TaskEvent
	var problems []string
	for _, ev := range ts.Events {
		switch ev.Type {
		case api.TaskTerminated:
			term = ev
		case api.TaskDriverFailure, api.TaskSetupFailure, api.TaskFailedValidation, api.TaskArtifactDownloadFailed, "Template":
			problems = append(problems, ev.Type+": "+firstNonEmpty(ev.DisplayMessage, ev.DriverError, ev.SetupError, ev.ValidationError, ev.Message))
		}
	}
	if term == nil {
		if len(problems) == 0 {
			problems = append(problems, "the sandbox task ended without running: "+alloc.ClientDescription)
		}
		cause := errors.New(strings.Join(problems, "; "))
		// The docker driver pulls only an image its node does not hold.
		if strings.Contains(cause.Error(), "Failed to pull") {
			cause = fmt.Errorf("%w: image %q is not on the node %s, and the docker driver could not pull it: load it into every client node's Docker engine (LoadImage with the target's load=, nomad.WithImageLoader, `docker load`) or push it to a registry the nodes pull from (%v)",
				port.ErrImageNotFound, spec.Image, alloc.NodeName, cause)
		}
		return port.CodeContainerFailed, cause
	}
	res.ExitCode = term.ExitCode
	if reason, ok := runner.ExecFailed(r.cfg.bridgePath != "", res.ExitCode, tailOf(res.Stderr)); ok {
		return port.CodeContainerFailed, errors.New(reason)
	}
	oom := term.Details["oom_killed"] == "true"
	if r.cfg.bridgePath != "" && res.ExitCode == 137 {
		var counted bool
		res.Stderr, counted = capture.TrimNotice(res.Stderr, tailOf(res.Stderr), bridgeapi.OOMNotice)
		oom = oom || counted
	}
	if oom {
		return port.CodeOOMKilled, fmt.Errorf("memory limit %d bytes reached", spec.Limits.MemoryBytes)
	}
	return "", nil
}

func tailOf(b []byte) []byte {
	if len(b) > 256 {
		return b[len(b)-256:]
	}
	return b
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// cleanup removes everything a run made: the job (purged), its allocations on their
// nodes (containers and directories, through the clients' garbage collection, now
// rather than at their next pass) and the proxy's variable. NotFound is success; what
// fails stays findable by Sweep.
func (r *Runner) cleanup(ctx context.Context, job string, alloc *api.Allocation, proxy bool, log interface {
	Warn(string, ...any)
}) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.cleanupTimeout)
	defer cancel()
	if err := r.remove(ctx, job, alloc, proxy); err != nil {
		log.Warn("removing the run's job failed; a Sweep will retry", logattr.Err, err)
	}
}

// nodeAnswers reports whether the node of a lost allocation answers again: its agent
// came back, and stops the allocation (its job was stopped) or destroys it once the
// job is purged. The servers keep such an allocation "lost" whatever the node reports,
// so the node is asked directly: a file system call the servers forward to it, which
// it answers whether or not it still has the allocation; a node that is gone gives
// "No path to node" (or nothing), and counts as not answering. (Reading the node's
// status would need a node right the runner's token does not have.)
func (r *Runner) nodeAnswers(ctx context.Context, allocID string) bool {
	var fi api.AllocFileInfo
	q := (&api.QueryOptions{Params: map[string]string{"path": "/"}}).WithContext(ctx)
	_, err := r.api.Raw().Query("/v1/client/fs/stat/"+allocID, &fi, q)
	return err == nil || strings.Contains(err.Error(), "Unknown allocation")
}

// remove purges a job, collects its allocations and deletes its proxy variable.
func (r *Runner) remove(ctx context.Context, job string, alloc *api.Allocation, proxy bool) error {
	var errs []error
	allocs := map[string]*api.Allocation{}
	if alloc != nil {
		allocs[alloc.ID] = alloc
	}
	var lost []string
	if alloc != nil && lostStatus(alloc.ClientStatus) && !r.nodeAnswers(ctx, alloc.ID) {
		lost = append(lost, alloc.ID+" on node "+alloc.NodeName)
	}
	if stubs, _, err := r.api.Jobs().Allocations(job, true, (&api.QueryOptions{}).WithContext(ctx)); err == nil {
		for _, s := range stubs {
			if allocs[s.ID] == nil {
				allocs[s.ID] = &api.Allocation{ID: s.ID, NodeID: s.NodeID}
			}
			if lostStatus(s.ClientStatus) && (alloc == nil || s.ID != alloc.ID) && !r.nodeAnswers(ctx, s.ID) {
				lost = append(lost, s.ID+" on node "+s.NodeName)
			}
		}
	}
	if len(lost) > 0 {
		// Its sandbox may still run on a node the servers cannot reach: purging the
		// job would hide it. Stopped, the job stays: Nomad stops the sandbox when the
		// node comes back, and a later Sweep purges the job then.
		if _, _, err := r.api.Jobs().Deregister(job, false, (&api.WriteOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
			return fmt.Errorf("stop job %s: %w", job, err)
		}
		// The key goes now: the lost node's sidecar has it already rendered.
		if proxy {
			if _, err := r.api.Variables().Delete(variablePath(job), (&api.WriteOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
				return fmt.Errorf("delete proxy variable of %s: %w", job, err)
			}
		}
		return fmt.Errorf("%w: job %s kept (stopped) for a later Sweep: allocation %s", ErrNodeLost, job, strings.Join(lost, ", "))
	}
	if _, _, err := r.api.Jobs().Deregister(job, true, (&api.WriteOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
		errs = append(errs, fmt.Errorf("purge job %s: %w", job, err))
	}
	for id, a := range allocs {
		// The allocation is terminal soon after the job is gone.
		if done, err := r.finished(ctx, id); err == nil {
			a = done
		} else if isNotFound(err) {
			continue
		}
		// The endpoint answers with an empty body, which the client reports as EOF; a
		// node that came back after losing the allocation may have removed it already.
		if err := r.api.Allocations().GC(a, (&api.QueryOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) && !errors.Is(err, io.EOF) &&
			!strings.Contains(err.Error(), "No such allocation on client") {
			errs = append(errs, fmt.Errorf("collect allocation %s: %w", id, err))
		}
	}
	if proxy {
		if _, err := r.api.Variables().Delete(variablePath(job), (&api.WriteOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete variable of %s: %w", job, err))
		}
	}
	return errors.Join(errs...)
}
