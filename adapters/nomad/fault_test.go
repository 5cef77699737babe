package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/testsupport/nomadtest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestEnvVerbatim: values Nomad would interpolate (${NOMAD_...}, ${node...}, ${env})
// reach the agent as given, through the init; without the init, and in argv, they are
// refused with ErrUnsupported rather than changed. About 3 s.
func TestEnvVerbatim(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	values := map[string]string{
		"TASK": "${NOMAD_TASK_NAME}", "NODE": "a ${node.unique.id} b", "MIXED": "$${x} ${ and $HOME",
		"PLAIN": "no interpolation here",
	}
	spec := port.RunSpec{RunID: sandboxtest.RunID("env-verbatim"), Image: e.image, Argv: []string{"/agent", "env"}, Env: values, Limits: port.Limits{Timeout: time.Minute}}
	res, err := r.RunOnce(ctx, spec)
	if err != nil {
		t.Fatalf("%v: %+v", err, res)
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	for k, want := range values {
		if got[k] != want {
			t.Errorf("%s = %q in the sandbox, want %q verbatim", k, got[k], want)
		}
	}
	if left, err := e.leftovers(r)(ctx, spec.RunID); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v %v", left, err)
	}

	noInit, err := NewRunner(WithAddress(e.cluster.Addr), WithOwner(e.owner), WithBridge(e.bridge))
	if err != nil {
		t.Fatal(err)
	}
	spec.RunID = sandboxtest.RunID("env-noinit")
	if _, err := noInit.RunOnce(ctx, spec); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("without the init: %v, want ErrUnsupported", err)
	}
	spec.Env = nil
	spec.Argv = []string{"/agent", "argv", "${NOMAD_TASK_NAME}"}
	if _, err := r.RunOnce(ctx, spec); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("${ in argv: %v, want ErrUnsupported", err)
	}
}

// lockedBuffer is a live writer tests read while the run goes on.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNodeLost kills (SIGKILL) the client agent of the node running a sandbox, on a
// cluster of its own: RunOnce must return ErrNodeLost (an ErrUnavailable) soon after
// the servers mark the node down, with the output live writers had; the job is kept
// (stopped), and Sweep reports it instead of purging it out of sight while the
// container still runs; SweepNode against the lost node's Docker then removes that
// orphan, leaving nothing of the owner. About 25 s.
func TestNodeLost(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := nomadtest.Start(ctx, nomadtest.Options{FastNodeLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := testenv.Owner("nodelost")
	r, err := NewRunner(WithAddress(c.Addr), WithOwner(owner), WithBridge(e.bridge), WithInit(e.init))
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("nodelost")
	out := &lockedBuffer{}
	type outcome struct {
		res *port.RunResult
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "chatter", "/tmp/progress", "100000"}, Stdout: out, Limits: port.Limits{Timeout: 2 * time.Minute}})
		done <- outcome{res, err, time.Now()}
	}()
	// The node running it, once its output flows.
	var node string
	for node == "" {
		if ctx.Err() != nil {
			t.Fatal("the run never started")
		}
		jobs, _, _ := c.API().Jobs().List(&api.QueryOptions{Prefix: jobPrefix + runID})
		for _, j := range jobs {
			allocs, _, _ := c.API().Jobs().Allocations(j.ID, true, nil)
			for _, a := range allocs {
				if a.ClientStatus == api.AllocClientStatusRunning && strings.Contains(out.String(), "line 000001") {
					node = a.NodeName
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.KillNode(node); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("RunOnce did not return after its node was lost")
	}
	t.Logf("RunOnce returned %v after the node's agent was killed: %v", o.at.Sub(killed).Round(100*time.Millisecond), o.err)
	if !errors.Is(o.err, ErrNodeLost) || !errors.Is(o.err, port.ErrUnavailable) {
		t.Errorf("RunOnce = %v, want ErrNodeLost", o.err)
	}
	if d := o.at.Sub(killed); d > 20*time.Second {
		t.Errorf("RunOnce took %v after the node was lost", d)
	}
	if !strings.Contains(out.String(), "line 000000") {
		t.Errorf("the output collected before the loss is missing: %q", out.String()[:min(100, len(out.String()))])
	}
	// The container, with our owner label, still runs on the dead node's Docker.
	running, err := exec.Command("docker", "ps", "-q", "--filter", "label="+port.LabelRunID+"="+runID, "--filter", "label=com.hashicorp.nomad.node_name="+node).Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range strings.Fields(string(running)) {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
	})
	if len(strings.Fields(string(running))) > 0 {
		rep, err := r.Sweep(ctx, port.SweepOptions{RunID: runID})
		if err != nil {
			t.Fatal(err)
		}
		var reported bool
		for _, e := range rep.Errors {
			reported = reported || errors.Is(e, ErrNodeLost)
		}
		if !reported {
			t.Errorf("Sweep did not report the orphan on the lost node: %+v", rep)
		}
		jobs, _, err := c.API().Jobs().List(&api.QueryOptions{Prefix: jobPrefix + runID})
		if err != nil || len(jobs) == 0 {
			t.Errorf("the lost run's job was purged while its sandbox still runs (%v)", err)
		}
	}
	// The node-local sweep, against the lost node's Docker (the cluster's clients
	// share this machine's), removes the orphan: Nomad no longer runs its allocation.
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	nrep, err := r.SweepNode(ctx, cli, port.SweepOptions{RunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SweepNode: removed %v, errors %v", nrep.Removed, nrep.Errors)
	left, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+port.LabelOwner+"="+owner).Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(strings.Fields(string(running))) == 0 || len(strings.Fields(string(left))) > 0 || len(nrep.Removed) == 0 {
		t.Errorf("after SweepNode, containers of the owner %q (running after the loss: %q); report %+v", left, running, nrep)
	}
}

// TestWritablePathsCapped: the paths a Nomad sandbox can write are capped at the
// run's tmpfs size or not there at all: a sandbox writing 16 MiB into each stops at
// the 8 MiB cap. Nomad binds three directories of the node's disk into every task
// (the allocation's, and the task's local/ and secrets/), with no bound and no way to
// leave them out; they are bound where the runtime masks them, so none is writable
// (before: 16 MiB into the root of /alloc, then into /local). The files where Nomad
// stores the output are read-only. About 8 s.
func TestWritablePathsCapped(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const capMiB = 8
	capped := map[string]bool{"/tmp": true}
	dirs := []string{"/alloc/data", "/alloc/tmp", "/alloc/logs", "/alloc", "/local", "/secrets",
		hiddenAllocDir, hiddenTaskDir, hiddenSecretsDir, "/.agentsandbox", "/tmp"}
	spec := port.RunSpec{RunID: sandboxtest.RunID("fill"), Image: e.image, Argv: append([]string{"/agent", "fill", "16"}, dirs...),
		Limits: port.Limits{Timeout: time.Minute, TmpfsBytes: capMiB << 20}}
	res, err := r.RunOnce(ctx, spec)
	if err != nil {
		t.Fatalf("%v: %+v", err, res)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != len(dirs) {
		t.Fatalf("%q", res.Stdout)
	}
	for i, dir := range dirs {
		var n int
		if _, err := fmt.Sscanf(lines[i], dir+" filled %d MiB", &n); err != nil {
			t.Fatalf("%s: %q", dir, lines[i])
		}
		t.Log(lines[i])
		switch {
		case capped[dir] && n != capMiB:
			t.Errorf("%s took %d MiB, want the run's %d MiB cap", dir, n, capMiB)
		case !capped[dir] && n != 0:
			t.Errorf("%s took %d MiB: one of Nomad's directories is writable (%s)", dir, n, lines[i])
		}
	}
}

// TestCopiedWorkspaceCapped: with WithWorkspaceCopy the workspace is capped at the
// run's disk size like /tmp (a tmpfs in the sandbox's container, sent back by the
// init through the task's bounded log files), so the agent cannot fill the node's
// disk through it. A sandbox writes twice the 8 MiB cap into /workspace and /tmp:
// both stop at the cap, and what fitted comes back to the host whole. Before, the
// workspace was the allocation's data/workspace on the node's disk with no bound
// (all 16 MiB taken). About 3 s.
func TestCopiedWorkspaceCapped(t *testing.T) {
	e := setup(t)
	r := e.runner(t, WithWorkspaceCopy(true), WithHostPaths(false))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const capMiB = 8
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := []string{port.WorkspacePath, "/tmp"}
	spec := port.RunSpec{RunID: sandboxtest.RunID("fill-ws"), Image: e.image, Argv: append([]string{"/agent", "fill", itoa(2 * capMiB)}, dirs...),
		WorkspaceDir: dir, Limits: port.Limits{Timeout: time.Minute, TmpfsBytes: capMiB << 20}}
	res, err := r.RunOnce(ctx, spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v: %+v", err, res)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != len(dirs) {
		t.Fatalf("%q", res.Stdout)
	}
	got := map[string]int{}
	for i, d := range dirs {
		var n int
		if _, err := fmt.Sscanf(lines[i], d+" filled %d MiB", &n); err != nil {
			t.Fatalf("%s: %q", d, lines[i])
		}
		t.Log(lines[i])
		got[d] = n
	}
	if got["/tmp"] != capMiB {
		t.Errorf("/tmp took %d MiB, want the run's %d MiB cap", got["/tmp"], capMiB)
	}
	// The input takes a page of the tmpfs: the last whole MiB may not fit.
	if n := got[port.WorkspacePath]; n != capMiB && n != capMiB-1 {
		t.Errorf("the copied workspace took %d MiB of %d written, want the run's %d MiB cap", n, 2*capMiB, capMiB)
	}
	// What fitted comes back (whole MiB, and the part of the next that fitted), and
	// the input is still there.
	fi, err := os.Stat(filepath.Join(dir, "fill"))
	if err != nil || fi.Size() < int64(got[port.WorkspacePath])<<20 || fi.Size() > capMiB<<20 {
		t.Errorf("the host's copy of the workspace's fill: %v %v; want %d MiB to the cap", fi, err, got[port.WorkspacePath])
	} else {
		t.Logf("copied back: fill, %d bytes", fi.Size())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "in.txt")); err != nil || string(b) != "from-host" {
		t.Errorf("in.txt = %q, %v", b, err)
	}
	if left, err := e.leftovers(r)(ctx, spec.RunID); err != nil || len(left) > 0 {
		t.Errorf("left after the run: %v %v", left, err)
	}
	// The workspace's volume (anonymous, labelled with the run) went with its
	// container when the runner collected the allocation.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+port.LabelRunID+"="+spec.RunID).Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.Fields(string(out))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("volumes of the run left: %s", out)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSweepNodeVolumes: SweepNode removes a volume of its owner that no container
// uses (a copied workspace's tmpfs volume whose container the driver removed without
// it), and spares one in use and another owner's. About 2 s.
func TestSweepNodeVolumes(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	runID := sandboxtest.RunID("nodevol")
	created := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	volume := func(owner string) string {
		t.Helper()
		out, err := exec.Command("docker", "volume", "create", "--label", port.LabelOwner+"="+owner, "--label", port.LabelRunID+"="+runID,
			"--label", port.LabelCreatedAt+"="+created, "-o", "type=tmpfs", "-o", "device=tmpfs", "-o", "o=size=1m").Output()
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", name).Run() })
		return name
	}
	dangling, inUse, other := volume(e.owner), volume(e.owner), volume(e.owner+"-other")
	holder := "agentsandbox-" + runID
	if out, err := exec.Command("docker", "run", "-d", "--name", holder, "--label", port.LabelOwner+"="+e.owner, "--network", "none",
		"-v", inUse+":/w", "--entrypoint", "/agent", e.image, "sleep", "60").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer func() { _ = exec.Command("docker", "rm", "-f", holder).Run() }()
	rep, err := r.SweepNode(ctx, cli, port.SweepOptions{RunID: runID})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("SweepNode: %+v, %v", rep, err)
	}
	if fmt.Sprint(rep.Removed) != fmt.Sprint([]string{"volume:" + dangling}) {
		t.Errorf("removed %v, want only the unused volume %s", rep.Removed, dangling)
	}
	for name, want := range map[string]bool{dangling: false, inUse: true, other: true} {
		if got := exec.Command("docker", "volume", "inspect", name).Run() == nil; got != want {
			t.Errorf("volume %s exists: %v, want %v", name, got, want)
		}
	}
}

// TestSweepNodeSparesLiveRun: SweepNode with no grace, during a run, removes nothing
// (Nomad still runs the allocation), and the run ends normally. About 6 s.
func TestSweepNodeSparesLiveRun(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	runID := sandboxtest.RunID("nodelive")
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "sleep", "4"}, Stdout: out, Limits: port.Limits{Timeout: time.Minute}})
		if err == nil && strings.TrimSpace(string(res.Stdout)) != "slept" {
			err = fmt.Errorf("result %+v", res)
		}
		done <- err
	}()
	for {
		ids, err := exec.Command("docker", "ps", "-q", "--filter", "label="+port.LabelRunID+"="+runID).Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.Fields(string(ids))) > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the run never got a container")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep, err := r.SweepNode(ctx, cli, port.SweepOptions{RunID: runID})
	if err != nil || len(rep.Removed) > 0 || len(rep.Errors) > 0 {
		t.Errorf("SweepNode during a live run = %+v, %v; want nothing removed", rep, err)
	}
	if err := <-done; err != nil {
		t.Errorf("the live run: %v", err)
	}
}

// TestOutputHostile: the output reaches the host exactly, whatever its bytes (not
// UTF-8, no final newline), capped at the prefix; the sandbox can write neither
// into the init's streams past its cap (through /proc/1/fd: the init is not
// dumpable) nor into the files where Nomad stores them. About 10 s.
func TestOutputHostile(t *testing.T) {
	e := setup(t)
	r := e.runner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	data := make([]byte, 100<<10)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(dir, "bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(limit int, argv ...string) *port.RunResult {
		t.Helper()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("hostile-out"), Image: e.image, Argv: append([]string{"/agent"}, argv...),
			WorkspaceDir: dir, OutputLimit: limit, Limits: port.Limits{Timeout: time.Minute}})
		if err != nil {
			t.Fatalf("RunOnce %v: %v %+v", argv, err, res)
		}
		return res
	}
	if res := run(64<<10, "cat", "/workspace/bin"); !bytes.Equal(res.Stdout, data[:64<<10]) || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Errorf("100 KiB of random bytes at a 64 KiB cap: got %d bytes (equal to the prefix: %v), truncated %v, exit %d",
			len(res.Stdout), bytes.Equal(res.Stdout, data[:min(len(res.Stdout), len(data))]), res.StdoutTruncated, res.ExitCode)
	}
	for _, target := range []string{"/proc/1/fd/1", "/proc/1/fd/2", flushedTarget("stdout")} {
		res := run(0, "write", target, "INJECTED")
		if res.ExitCode != 4 || strings.Contains(string(res.Stdout)+string(res.Stderr), "INJECTED") {
			t.Errorf("writing %s: exit %d stdout %q stderr %q, want refused", target, res.ExitCode, res.Stdout, res.Stderr)
		}
		t.Logf("%s: %s", target, strings.TrimSpace(string(res.Stderr)))
	}
}

// TestNodeReturns: the client agent of a running sandbox's node is killed, then comes
// back (on a cluster of its own). No operator acts: the returning agent stops the
// sandbox itself (its job was stopped, not purged, when the run ended ErrNodeLost),
// and a Sweep then leaves nothing of the owner, neither job nor container. About 30 s.
func TestNodeReturns(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := nomadtest.Start(ctx, nomadtest.Options{FastNodeLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := testenv.Owner("nodereturns")
	r, err := NewRunner(WithAddress(c.Addr), WithOwner(owner), WithBridge(e.bridge), WithInit(e.init))
	if err != nil {
		t.Fatal(err)
	}
	runID := sandboxtest.RunID("nodereturns")
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := r.RunOnce(ctx, port.RunSpec{RunID: runID, Image: e.image, Argv: []string{"/agent", "chatter", "/tmp/progress", "100000"}, Stdout: out, Limits: port.Limits{Timeout: 2 * time.Minute}})
		done <- err
	}()
	var node string
	for node == "" {
		if ctx.Err() != nil {
			t.Fatal("the run never started")
		}
		jobs, _, _ := c.API().Jobs().List(&api.QueryOptions{Prefix: jobPrefix + runID})
		for _, j := range jobs {
			allocs, _, _ := c.API().Jobs().Allocations(j.ID, true, nil)
			for _, a := range allocs {
				if a.ClientStatus == api.AllocClientStatusRunning && strings.Contains(out.String(), "line 000001") {
					node = a.NodeName
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	containers := func() []string {
		ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+port.LabelOwner+"="+owner).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(ids))
	}
	t.Cleanup(func() {
		for _, id := range containers() {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
	})
	if err := c.KillNode(node); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrNodeLost) {
		t.Fatalf("RunOnce = %v, want ErrNodeLost", err)
	}
	if len(containers()) == 0 {
		t.Fatal("the sandbox's container is gone before its node returns: nothing tested")
	}
	back := time.Now()
	if err := c.RestartNode(node); err != nil {
		t.Fatal(err)
	}
	for len(containers()) > 0 {
		if time.Since(back) > time.Minute {
			t.Fatalf("the returning node left the sandbox's containers %v", containers())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the returning node removed the sandbox's containers %v after its restart", time.Since(back).Round(100*time.Millisecond))
	rep, err := r.Sweep(ctx, port.SweepOptions{RunID: runID})
	if err != nil || len(rep.Errors) > 0 {
		t.Errorf("Sweep after the node returned: %+v %v", rep, err)
	}
	if jobs, _, err := c.API().Jobs().List(&api.QueryOptions{Prefix: jobPrefix + runID}); err != nil || len(jobs) > 0 {
		t.Errorf("after the Sweep, jobs %v (%v)", jobs, err)
	}
}
