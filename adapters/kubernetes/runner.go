package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner/imageref"
	"github.com/agentsandbox/sandbox/port"
)

// Runner runs sandboxes as Kubernetes Pods, one Pod per run, through the API server.
// It is safe for concurrent use.
type Runner struct {
	cfg config
	cli k8s.Interface
}

var (
	_ port.SandboxRunner   = (*Runner)(nil)
	_ port.Sweeper         = (*Runner)(nil)
	_ port.RuntimeReporter = (*Runner)(nil)
)

// NewRunner returns a Runner. It does no I/O; use Ping to check the cluster.
func NewRunner(opts ...Option) (*Runner, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, opErr("NewRunner", "", err)
	}
	cli := cfg.client
	if cli == nil {
		var err error
		if cli, err = k8s.NewForConfig(cfg.restConfig); err != nil {
			return nil, opErr("NewRunner", "", port.Invalidf("kubernetes client: %v", err))
		}
	}
	cfg.logger = cfg.logger.With(logattr.Component, "kubernetes.runner")
	return &Runner{cfg: cfg, cli: cli}, nil
}

// Ping checks that the API server answers and the runner may list Pods in its
// namespace. Errors wrap port.ErrUnavailable.
func (r *Runner) Ping(ctx context.Context) error {
	if _, err := r.cli.CoreV1().Pods(r.cfg.namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return opErr("Ping", "", fmt.Errorf("%w: %w", port.ErrUnavailable, err))
	}
	return nil
}

// Owner returns the owner label value of the runner's Pods.
func (r *Runner) Owner() string { return r.cfg.owner }

// Namespace returns the namespace of the runner's Pods.
func (r *Runner) Namespace() string { return r.cfg.namespace }

// Client returns the runner's clientset.
func (r *Runner) Client() k8s.Interface { return r.cli }

// Runtime implements port.RuntimeReporter: the RuntimeClass of the runner's Pods
// ("" for the cluster's default, which is taken to be runc).
func (r *Runner) Runtime() string { return r.cfg.runtimeClass }

// RunOnce implements port.SandboxRunner: it creates one Pod, follows its log, waits
// for the agent container to end and deletes the Pod on every path (see remove).
//
// Errors besides the port's: port.ErrUnsupported for what a Pod cannot express here
// (an internal network, a runtime volume for the LLM socket, host paths with
// WithHostPaths(false), a process limit below the nodes'); a Pod the cluster refuses or
// cannot start (admission, a missing RuntimeClass or image, a command that cannot be
// started, the network init failing) gives a *port.RunError with
// port.CodeContainerFailed; a Pod deleted, evicted or lost with its node a
// *PodLostError (port.CodeInternal) with the output collected so far.
func (r *Runner) RunOnce(ctx context.Context, spec port.RunSpec) (res *port.RunResult, err error) {
	spec = spec.WithDefaults()
	if err := r.check(spec); err != nil {
		return nil, opErr("RunOnce", spec.RunID, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("RunOnce", spec.RunID, err)
	}
	start := time.Now()
	res = &port.RunResult{ExitCode: -1}
	fail := func(code port.ErrorCode, cause error) (*port.RunResult, error) {
		res.ErrorCode = code
		res.Duration = time.Since(start)
		return res, opErr("RunOnce", spec.RunID, &port.RunError{Code: code, Err: cause})
	}
	ps := podSpec{name: podName(spec.RunID), created: start}
	pod := r.buildPod(spec, ps)
	log := r.cfg.logger.With(logattr.RunID, spec.RunID, "pod", ps.name)
	pods := r.cli.CoreV1().Pods(r.cfg.namespace)

	// Cleanup is registered before the Pod exists and runs with a fresh context, so a
	// cancelled caller (or a panic) cannot leak it.
	created, ended := false, false
	defer func() {
		if created {
			r.cleanup(context.WithoutCancel(ctx), ps.name, ended, log)
		}
	}()
	out := newOutput(spec.OutputLimit, spec.Stdout, spec.Stderr)
	var follow sync.WaitGroup
	defer follow.Wait()
	followCtx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()

	createdPod, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		err = classify(err)
		if errors.Is(err, port.ErrUnavailable) || ctx.Err() != nil {
			return nil, opErr("RunOnce", spec.RunID, err)
		}
		return fail(port.CodeContainerFailed, fmt.Errorf("creating the pod: %w", err))
	}
	created = true

	runCtx, cancel := context.WithTimeout(ctx, spec.Limits.Timeout)
	defer cancel()
	following := false
	startFollow := func() {
		if following {
			return
		}
		following = true
		follow.Add(1)
		go func() {
			defer follow.Done()
			r.follow(followCtx, ps.name, out, log)
		}()
	}
	tCreated := time.Now()
	var tInit, tRunning time.Time
	final, waitErr := r.wait(runCtx, createdPod, done, func(p *corev1.Pod) {
		if tInit.IsZero() && len(p.Status.InitContainerStatuses) > 0 && p.Status.InitContainerStatuses[0].State.Terminated != nil {
			tInit = time.Now()
		}
		if st := agentState(p); st != nil && (st.Running != nil || st.Terminated != nil) {
			if tRunning.IsZero() {
				tRunning = time.Now()
			}
			startFollow()
		}
	})
	tEnded := time.Now()
	defer func() {
		log.Debug("run phases", "create", tCreated.Sub(start), "init-done", since(tInit, tCreated), "running", since(tRunning, tCreated),
			"ended", tEnded.Sub(tCreated), "collected", time.Since(tEnded))
	}()
	if waitErr != nil && runCtx.Err() != nil {
		// The time limit or the caller ended the run: stop it where it is, keeping
		// what it wrote so far (the follower has it; the kill ends its stream).
		r.kill(context.WithoutCancel(ctx), ps.name, log)
		r.drain(followCtx, &follow, stopFollow, following, ps.name, out)
		r.fill(res, out)
		cause := fmt.Errorf("run exceeded its %v limit", spec.Limits.Timeout)
		if ctx.Err() != nil {
			cause = context.Cause(ctx)
		}
		return fail(port.CodeTimeout, cause)
	}
	// Nothing of the Pod runs any more (the agent ended, or never started), unless it
	// was lost: then its deletion is already under way and is waited for.
	ended = waitErr == nil || !errors.Is(waitErr, ErrPodLost)
	r.drain(followCtx, &follow, stopFollow, following, ps.name, out)
	r.fill(res, out)
	if waitErr != nil {
		return fail(waitCode(waitErr), waitErr)
	}
	res.Duration = time.Since(start)
	return r.outcome(final, res, fail)
}

// waitCode is the error code of a wait that did not see the agent end: a lost Pod is
// internal, a container that could not run is the container's failure.
func waitCode(err error) port.ErrorCode {
	var lost *PodLostError
	var cf *containerFailure
	if !errors.As(err, &lost) && errors.As(err, &cf) {
		return port.CodeContainerFailed
	}
	return port.CodeInternal
}

// since is t-from, or 0 when t never happened.
func since(t, from time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from)
}

// check validates spec at the boundary: the port's rules, then what a Pod can express.
func (r *Runner) check(spec port.RunSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := spec.CheckBridge(r.cfg.bridgePath != ""); err != nil {
		return err
	}
	if _, err := imageref.Parse(spec.Image); err != nil {
		return err
	}
	if spec.Network.Internal != "" {
		return fmt.Errorf("%w: kubernetes: internal networks (a sandbox Pod always has none)", port.ErrUnsupported)
	}
	if spec.LLM != nil && spec.LLM.Volume != "" {
		return fmt.Errorf("%w: kubernetes: an LLM socket in a runtime volume (use a node-local proxy's host directory)", port.ErrUnsupported)
	}
	for k, v := range spec.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return port.Invalidf("label key %q is not a Kubernetes label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return port.Invalidf("label %q: the value is not a Kubernetes label value: %s", k, strings.Join(errs, "; "))
		}
	}
	if len(spec.Argv) == 0 {
		return port.Invalidf("argv is empty: on Kubernetes the image's own command is not known to the host, so give the argv")
	}
	switch {
	case r.cfg.runtimePIDs:
	case r.cfg.nodePIDs == 0:
		return fmt.Errorf("%w: kubernetes: no process limit can be promised (WithRuntimePIDsLimit, or declare the nodes' podPidsLimit with WithNodePIDsLimit)", port.ErrUnsupported)
	case spec.Limits.PIDs < r.cfg.nodePIDs:
		return fmt.Errorf("%w: kubernetes: a process limit of %d, below the nodes' per-pod limit of %d (Kubernetes has no per-pod field)", port.ErrUnsupported, spec.Limits.PIDs, r.cfg.nodePIDs)
	}
	if spec.WorkspaceDir != "" || len(spec.Mounts) > 0 || spec.LLM != nil {
		if !r.cfg.hostPaths {
			return fmt.Errorf("%w: kubernetes: host paths (workspace, mounts, the LLM socket directory) with WithHostPaths(false)", port.ErrUnsupported)
		}
		if err := spec.CheckHostPaths(); err != nil {
			return err
		}
	}
	return nil
}

// containerFailure is a Pod that could not start the agent.
type containerFailure struct{ reason, message string }

func (e *containerFailure) Error() string {
	if imageReasons[e.reason] {
		return fmt.Sprintf("kubernetes: %s: image not found: the node has no such image and could not pull it: load it into the nodes' container runtime (LoadImage with the target's load=, kubernetes.WithImageLoader, `ctr -n k8s.io images import`) or push it to a registry the nodes pull from, and check the pull policy (WithImagePullPolicy): %s", e.reason, e.message)
	}
	return fmt.Sprintf("kubernetes: %s: %s", e.reason, e.message)
}

// Is makes a container that waits for an image it cannot get match
// port.ErrImageNotFound (and port.ErrNotFound).
func (e *containerFailure) Is(target error) bool {
	return imageReasons[e.reason] && (target == port.ErrImageNotFound || target == port.ErrNotFound)
}

// imageReasons are the waiting reasons of a container whose image the node cannot
// get.
var imageReasons = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true}

// Reasons a container waits forever: it will not start.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true, "PreCreateHookError": true, "PreStartHookError": true,
}

func agentState(p *corev1.Pod) *corev1.ContainerState {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == agentName {
			return &p.Status.ContainerStatuses[i].State
		}
	}
	return nil
}

// done says whether p has reached an end, and the error when the end is not the
// agent's exit.
func done(p *corev1.Pod) (bool, error) {
	for _, s := range p.Status.InitContainerStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
			return true, &containerFailure{reason: "the network init failed", message: strings.TrimSpace(t.Reason + " " + t.Message)}
		}
		if w := s.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			return true, &containerFailure{reason: w.Reason, message: w.Message}
		}
	}
	if st := agentState(p); st != nil {
		if st.Terminated != nil {
			return true, nil
		}
		if w := st.Waiting; w != nil && fatalWaiting[w.Reason] {
			return true, &containerFailure{reason: w.Reason, message: w.Message}
		}
	}
	switch {
	case p.Status.Reason == "Evicted":
		return true, &PodLostError{Pod: p.Name, Reason: "evicted", Message: p.Status.Message}
	case p.Status.Reason == "NodeLost" || p.Status.Reason == "Terminated" && p.Spec.NodeName != "":
		return true, &PodLostError{Pod: p.Name, Reason: "node lost", Message: p.Status.Message}
	case p.Status.Reason == "DeadlineExceeded":
		return true, &PodLostError{Pod: p.Name, Reason: "past its activeDeadlineSeconds", Message: p.Status.Message}
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		// Ended without the agent's status (e.g. a failed admission on the node).
		return true, &containerFailure{reason: "pod " + strings.ToLower(string(p.Status.Phase)), message: strings.TrimSpace(p.Status.Reason + " " + p.Status.Message)}
	case p.DeletionTimestamp != nil:
		return true, &PodLostError{Pod: p.Name, Reason: "deleted", Message: "by someone other than the runner"}
	}
	return false, nil
}

// wait watches the Pod until isDone says it is done, calling seen on each version.
func (r *Runner) wait(ctx context.Context, p *corev1.Pod, isDone func(*corev1.Pod) (bool, error), seen func(*corev1.Pod)) (*corev1.Pod, error) {
	pods := r.cli.CoreV1().Pods(r.cfg.namespace)
	rv := p.ResourceVersion
	for {
		seen(p)
		if ok, err := isDone(p); ok {
			return p, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String(), ResourceVersion: rv})
		if err != nil {
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			r.cfg.logger.Debug("watch failed; polling once", logattr.Err, err)
			select {
			case <-ctx.Done():
				return p, ctx.Err()
			case <-time.After(r.cfg.pollInterval):
			}
		} else {
			next, gone, err := r.watchOnce(ctx, w, isDone, seen)
			w.Stop()
			switch {
			case gone:
				return p, &PodLostError{Pod: p.Name, Reason: "deleted", Message: "by someone other than the runner"}
			case next != nil && err == nil:
				return next, nil
			case next != nil:
				return next, err
			}
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
		}
		// The watch ended (or could not start): read the Pod and watch again from there.
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return p, &PodLostError{Pod: p.Name, Reason: "deleted", Message: "by someone other than the runner"}
		case err != nil:
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			continue
		}
		p, rv = cur, cur.ResourceVersion
	}
}

// watchOnce reads w until the Pod is done (returning it), deleted (gone) or the watch
// ends (nil).
func (r *Runner) watchOnce(ctx context.Context, w watch.Interface, isDone func(*corev1.Pod) (bool, error), seen func(*corev1.Pod)) (p *corev1.Pod, gone bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return nil, false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, true, nil
			case watch.Added, watch.Modified:
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				seen(pod)
				if ok, err := isDone(pod); ok {
					return pod, false, err
				}
			case watch.Error:
				return nil, false, nil
			}
		}
	}
}

// follow streams the agent container's log into out until it ends.
func (r *Runner) follow(ctx context.Context, pod string, out *output, log interface{ Debug(string, ...any) }) {
	s, err := r.cli.CoreV1().Pods(r.cfg.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: agentName, Follow: true}).Stream(ctx)
	if err != nil {
		log.Debug("following the log failed", logattr.Err, err)
		return
	}
	defer s.Close()
	if err := out.read(s); err != nil {
		log.Debug("the followed log broke", logattr.Err, err)
	}
}

// drain waits (bounded) for the follower to reach the end of the log; if it broke off
// before the end frame, the whole log is read once more and only the rest is added.
func (r *Runner) drain(ctx context.Context, wg *sync.WaitGroup, stop context.CancelFunc, following bool, pod string, out *output) {
	if following {
		ch := make(chan struct{})
		go func() { wg.Wait(); close(ch) }()
		select {
		case <-ch:
		case <-out.doneCh:
		case <-time.After(15 * time.Second):
		}
		stop()
		<-ch
	}
	if out.complete() {
		return
	}
	// The follower's context is cancelled by now: a fresh one for the last read.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	b, err := r.cli.CoreV1().Pods(r.cfg.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: agentName}).Do(rctx).Raw()
	if err == nil {
		_ = out.read(bytes.NewReader(b))
	}
}

func (r *Runner) fill(res *port.RunResult, out *output) {
	res.Stdout, res.Stderr, res.StdoutTruncated, res.StderrTruncated = out.result()
	// The bridge's OOM notice ends stderr when the kernel killed the agent.
	if b, ok := bytes.CutSuffix(res.Stderr, []byte(bridgeapi.OOMNotice)); ok {
		res.Stderr = b
		res.ErrorCode = port.CodeOOMKilled // provisional; outcome decides
	}
}

// outcome classifies a Pod whose agent container ended.
func (r *Runner) outcome(p *corev1.Pod, res *port.RunResult, fail func(port.ErrorCode, error) (*port.RunResult, error)) (*port.RunResult, error) {
	oomNotice := res.ErrorCode == port.CodeOOMKilled
	res.ErrorCode = ""
	st := agentState(p)
	if st == nil || st.Terminated == nil {
		return fail(port.CodeInternal, fmt.Errorf("kubernetes: pod %s ended without the agent's status", p.Name))
	}
	t := st.Terminated
	res.ExitCode = int(t.ExitCode)
	if oomNotice || t.Reason == "OOMKilled" {
		return fail(port.CodeOOMKilled, fmt.Errorf("the agent exceeded its memory limit"))
	}
	if res.ExitCode == bridgeapi.ExitNotFound || res.ExitCode == bridgeapi.ExitCannotExec {
		tail := res.Stderr[max(0, len(res.Stderr)-4096):]
		if why, ok := bridgeapi.ExecFailure(tail); ok {
			return fail(port.CodeContainerFailed, errors.New(why))
		}
		if i := bytes.LastIndex(tail, []byte("sandbox-kube-init: cannot start the command: ")); i >= 0 {
			return fail(port.CodeContainerFailed, errors.New(strings.TrimSpace(string(tail[i:]))))
		}
	}
	return res, nil
}

// kill deletes the Pod at once (no grace): the run is over.
func (r *Runner) kill(ctx context.Context, pod string, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.cleanupTimeout)
	defer cancel()
	if err := r.cli.CoreV1().Pods(r.cfg.namespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))}); err != nil && !apierrors.IsNotFound(err) {
		log.Warn("killing the pod failed", logattr.Err, err)
	}
}

// cleanup deletes the Pod and waits until the kubelet has removed it. NotFound is
// success; what fails stays findable by Sweep.
func (r *Runner) cleanup(ctx context.Context, pod string, ended bool, log interface{ Warn(string, ...any) }) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.cleanupTimeout)
	defer cancel()
	if err := r.remove(ctx, pod, ended); err != nil {
		log.Warn("removing the run's pod failed; a Sweep will retry", logattr.Err, err)
	}
}

// remove deletes a Pod and waits until it is gone. ended says that nothing of the Pod
// runs any more (every container terminated, or never started): the object is then
// removed at once (grace 0) and the kubelet cleans up the sandbox, volumes and cgroups
// of the vanished Pod by itself, instead of the run waiting about 2 s for its
// bookkeeping. Otherwise (a kill, a sweep) the kubelet stops the containers (grace
// 1 s) and the Pod is gone only once it has confirmed that.
func (r *Runner) remove(ctx context.Context, pod string, ended bool) error {
	pods := r.cli.CoreV1().Pods(r.cfg.namespace)
	grace := int64(1)
	if ended {
		grace = 0
	}
	err := pods.Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod).String()})
	if err == nil {
		defer w.Stop()
	}
	for {
		if _, err := pods.Get(ctx, pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		var ch <-chan watch.Event
		if w != nil {
			ch = w.ResultChan()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s still there: %w", pod, ctx.Err())
		case ev, ok := <-ch:
			if ev.Type == watch.Deleted {
				return nil
			}
			if !ok {
				w = nil
			}
		case <-time.After(time.Second):
		}
	}
}
