package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
)

// PreloadHarness is what TestPreloadPool needs.
type PreloadHarness struct {
	// Pooler is the runner under test.
	Pooler port.Pooler
	// Image is a Node.js image (node at Node, the sandbox user able to run it),
	// available to the runner.
	Image string
	// Node is node's absolute path in Image.
	Node string
	// Leftovers lists whatever the runner's owner still holds (after the pools
	// closed): it must be empty.
	Leftovers func(t testing.TB) []string
}

// TestPreloadPool runs the pre-booted slot suite on a runner's warm pools, with the
// generic Node.js preloader (package preload): isolation between runs N and N+1,
// the attestation taken before the claim, a missing entrypoint, a preload that
// writes to stdout before the claim. About 20 s.
func TestPreloadPool(t *testing.T, h PreloadHarness) {
	t.Run("isolation", func(t *testing.T) { preloadIsolation(t, h) })
	t.Run("bad-input", func(t *testing.T) { preloadBadInput(t, h) })
	if left := h.Leftovers(t); len(left) > 0 {
		t.Errorf("after the pools closed: %v", left)
	}
}

// preloadDir writes the generic preloader and a module it loads ahead (state.mjs: a
// mutable object living in the pre-booted process) into a directory the sandbox
// user can read.
func preloadDir(t *testing.T) string {
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, preload.NodeName), preload.Node, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "state.mjs"), []byte("export const state = { canaries: [], pid: process.pid };\n"), 0o644))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// preloadSpec is a run of the preloaded Node shape: the preloader and state.mjs
// mounted at /opt/preload, state.mjs loaded ahead.
func preloadSpec(h PreloadHarness, dir string) port.RunSpec {
	return port.RunSpec{
		Image: h.Image, WorkspaceDir: "/", Limits: port.Limits{Timeout: time.Minute, MemoryBytes: 512 << 20},
		Preload: &port.Preload{
			Argv:   []string{h.Node, "/opt/preload/" + preload.NodeName, "--import", "/opt/preload/state.mjs"},
			Mounts: []port.Mount{{Source: dir, Target: "/opt/preload"}},
		},
	}
}

// waitFull waits until p has size ready sandboxes: a readiness wait, not a timing
// assertion.
func waitFull(t *testing.T, p port.Pool, size int) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); p.Stats().Ready < size; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool never filled: %+v", p.Stats())
		}
	}
}

// agentJS is the run's agent, in its workspace: it reports what it can see of earlier
// runs (the pre-booted process's memory, /tmp, env, processes), then plants its own
// canary in each.
const agentJS = `
import fs from 'node:fs';
const { state } = await import('/opt/preload/state.mjs');
const canary = process.argv[2];
const seen = {
  memory: [...state.canaries],
  tmp: fs.readdirSync('/tmp').filter((f) => f.startsWith('canary')),
  env: Object.entries(process.env).filter(([k, v]) => v.startsWith('canary') && v !== canary).map(([k]) => k),
  workspace: fs.readdirSync('/workspace').filter((f) => f.startsWith('canary')),
  procs: fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p)).map((p) => { try { return fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').replaceAll('\0', ' ').trim(); } catch { return '?'; } }),
  pid: process.pid, preloadPid: state.pid, cwd: process.cwd(), token: process.env.RUN_TOKEN,
};
state.canaries.push(canary);
fs.writeFileSync('/tmp/' + canary, canary);
fs.writeFileSync('/workspace/' + canary, canary);
globalThis.leftBehind = canary;
console.log(JSON.stringify(seen));
`

type agentSaw struct {
	Memory, Tmp, Env, Workspace, Procs []string
	Pid, PreloadPid                    int
	Cwd, Token                         string
}

// preloadIsolation: runs N and N+1 of a pool of pre-booted Node runtimes (one
// slot, so N+1 runs in the next one): each is served preloaded, runs in the process
// that was booted before it (its pid is the preloaded one) with its own environment
// and workspace, and sees nothing run N planted in the preloaded process's memory,
// /tmp, the environment, the workspace or the process table. The attestation taken
// before the claim comes back with the run. About 10 s.
func preloadIsolation(t *testing.T, h PreloadHarness) {
	dir := preloadDir(t)
	spec := preloadSpec(h, dir)
	p, err := h.Pooler.WarmPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	must(t, err)
	var saw [2]agentSaw
	for i, canary := range []string{"canary-run-n", "canary-run-n1"} {
		waitFull(t, p, 1)
		ws := t.TempDir()
		must(t, os.Chmod(ws, 0o777))
		must(t, os.WriteFile(filepath.Join(ws, "agent.mjs"), []byte(agentJS), 0o644))
		spec.RunID = RunID("preload")
		spec.WorkspaceDir = ws
		spec.Env = map[string]string{"RUN_TOKEN": canary}
		spec.Argv = []string{"node", "agent.mjs", canary}
		res, err := p.RunOnce(context.Background(), spec)
		if err != nil {
			t.Fatalf("run %d: %v %+v", i, err, res)
		}
		if res.Start != port.StartPreloaded {
			t.Errorf("run %d started %q (%s), want preloaded", i, res.Start, res.StartNote)
		}
		if a := res.PreloadAttestation; a == nil || !a.NoNewPrivs || len(a.Interfaces) != 1 || a.Interfaces[0] != "lo" || a.UID != 1001 {
			t.Errorf("run %d: the attestation before the claim: %+v", i, a)
		}
		// The pre-booted Node held its heap before the claim (a bare stub holds ~1 MiB).
		if m := res.Memory; m == nil || m.ClaimBytes < 8<<20 || m.PeakBytes < m.ClaimBytes || m.LimitBytes != 512<<20 || m.OOMKills != 0 {
			t.Errorf("run %d: memory of the pre-booted slot: %+v", i, m)
		}
		if err := json.Unmarshal(res.Stdout, &saw[i]); err != nil {
			t.Fatalf("run %d: %v: %s / %s", i, err, res.Stdout, res.Stderr)
		}
		if saw[i].Pid != saw[i].PreloadPid || saw[i].Cwd != "/workspace" || saw[i].Token != canary {
			t.Errorf("run %d did not run in the pre-booted process with its own env and dir: %+v", i, saw[i])
		}
	}
	n1 := saw[1]
	if len(n1.Memory)+len(n1.Tmp)+len(n1.Env)+len(n1.Workspace) > 0 {
		t.Errorf("run N+1 saw run N's canaries: %+v", n1)
	}
	for _, c := range n1.Procs {
		if strings.Contains(c, "canary-run-n ") || strings.HasSuffix(c, "canary-run-n") {
			t.Errorf("run N+1 sees a process of run N: %q", c)
		}
	}
	if st := p.Stats(); st.Warm != 2 || st.PreloadFailed != 0 {
		t.Errorf("stats: %+v", st)
	}
	must(t, p.Close(context.Background()))
}

// preloadBadInput: a claim naming an entry the runtime does not have is a
// typed error naming it; a preload that writes to stdout before its claim never
// serves a run: its slots are discarded and counted, and the run runs cold, saying
// so. About 10 s.
func preloadBadInput(t *testing.T, h PreloadHarness) {
	dir := preloadDir(t)
	spec := preloadSpec(h, dir)
	p, err := h.Pooler.WarmPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	must(t, err)
	waitFull(t, p, 1)
	ws := t.TempDir()
	must(t, os.Chmod(ws, 0o777))
	spec.RunID = RunID("preload-missing")
	spec.WorkspaceDir = ws
	spec.Argv = []string{"node", "missing-agent.mjs"}
	res, err := p.RunOnce(context.Background(), spec)
	var ee *port.EntrypointError
	if !errors.As(err, &ee) || !errors.Is(err, port.ErrNotFound) || ee.Entry != "/workspace/missing-agent.mjs" {
		t.Fatalf("missing entry: %v (%T) %+v", err, err, res)
	}
	if !errors.Is(err, port.ErrContainerFailed) {
		t.Errorf("missing entry is not a container failure: %v", err)
	}
	must(t, p.Close(context.Background()))

	bad := preloadSpec(h, dir)
	bad.Preload.Argv = []string{h.Node, "-e", "process.stdout.write('early'); setInterval(() => {}, 1000)"}
	bp, err := h.Pooler.WarmPool(context.Background(), port.TemplateOf(bad), port.PoolOptions{Size: 1})
	must(t, err)
	defer bp.Close(context.Background())
	for deadline := time.Now().Add(2 * time.Minute); bp.Stats().PreloadFailed < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the bad preload was never counted: %+v", bp.Stats())
		}
	}
	bad.RunID = RunID("preload-cold")
	bad.WorkspaceDir = ws
	must(t, os.WriteFile(filepath.Join(ws, "ok.mjs"), []byte("console.log('cold ok')"), 0o644))
	bad.Argv = []string{h.Node, "ok.mjs"}
	res, err = bp.RunOnce(context.Background(), bad)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "cold ok" {
		t.Fatalf("cold fallback: %v %+v", err, res)
	}
	if res.Start != port.StartCold || res.StartNote == "" {
		t.Errorf("the cold run did not say so: %q %q", res.Start, res.StartNote)
	}
	if st := bp.Stats(); st.Warm != 0 || st.Ready != 0 {
		t.Errorf("a failed preload served a run or was ready: %+v", st)
	}
}

// PreloadTemplate is the shape of a pool of pre-booted Node.js runtimes (the generic
// preloader of package preload, mounted from a directory of the test's), for pool
// host tests (TestPoolEndsWithHost) of pre-booted slots. image and node are as in
// PreloadHarness.
func PreloadTemplate(t *testing.T, image, node string) port.PoolTemplate {
	return port.TemplateOf(preloadSpec(PreloadHarness{Image: image, Node: node}, preloadDir(t)))
}
