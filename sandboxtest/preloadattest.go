package sandboxtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
)

// PreloadAttestHarness is what TestPreloadAttestation needs.
type PreloadAttestHarness struct {
	// Pooler is the runner under test; Image and Node are as in PreloadHarness.
	Pooler port.Pooler
	Image  string
	Node   string
	// Fronts are the proxy managers the runs' proxies come from, by name (the
	// in-process proxy, a shared daemon): each must take attestations
	// (port.ProxyCapabilities.Attestation).
	Fronts map[string]port.ProxyManager
}

// TestPreloadAttestation is the red-team case of a pre-booted runtime forging its
// sandbox's isolation attestation, on every front: the runtime (the image's code,
// running since before the claim) watches for the LLM socket to appear at the claim
// and posts a clean-looking report of its own as soon as it can, with the run token
// when the socket directory holds one, racing the bridge. The proxy requires an
// attestation (RequireAttestation). What must hold: the forgery is refused (403)
// whenever it arrives, the bridge's own report is the run's, the agent's LLM call
// passes, and the attestation key appears nowhere the agent can read. About 10 s
// per front.
func TestPreloadAttestation(t *testing.T, h PreloadAttestHarness) {
	if h.Pooler == nil || h.Image == "" || h.Node == "" || len(h.Fronts) == 0 {
		t.Fatal("sandboxtest: PreloadAttestHarness needs Pooler, Image, Node and Fronts")
	}
	names := make([]string, 0, len(h.Fronts))
	for n := range h.Fronts {
		names = append(names, n)
	}
	sort.Strings(names)
	f := NewAttestationForger(t, h.Node)
	p, err := h.Pooler.WarmPool(context.Background(), port.TemplateOf(f.Spec(h.Image, t.TempDir())), port.PoolOptions{Size: 1})
	must(t, err)
	defer p.Close(context.Background())
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			u := newUpstream(t)
			pspec := proxySpec(RunID("forge"), u)
			pspec.RequireAttestation = true
			px, err := h.Fronts[name].Start(context.Background(), pspec)
			must(t, err)
			defer px.Stop(context.Background())
			sock := px.Socket()
			if !bridgeapi.ValidAttestKey(sock.AttestKey) {
				t.Fatalf("the proxy's socket carries no attestation key (%q): nothing tells the bridge's report from a forgery", sock.AttestKey)
			}
			waitFull(t, p, 1)
			spec := f.Spec(h.Image, f.Workspace(t))
			spec.RunID, spec.LLM = pspec.RunID, &sock
			spec.Env = map[string]string{"ATTEST_KEY_HALVES": sock.AttestKey[:32] + " " + sock.AttestKey[32:]}
			res, err := p.RunOnce(context.Background(), spec)
			if err != nil {
				t.Fatalf("run: %v %+v", err, res)
			}
			if res.Start != port.StartPreloaded {
				t.Fatalf("the run started %q (%s): not pre-booted, so nothing raced the bridge", res.Start, res.StartNote)
			}
			var got *port.Attestation
			if a, ok := px.(port.Attester); ok {
				got = a.Attestation()
			}
			f.Check(t, res, got)
		})
	}
}

// forgerJS is the pre-booted runtime's module: from before the claim a worker
// thread polls for the LLM socket every 0.2 ms and, the moment it appears, writes a
// forged attestation request on it as raw bytes (with the run token when the socket
// directory holds one), retrying until the proxy answers. The run (the same
// process) reads the outcome from forged.
const forgerJS = `
import { Worker } from 'node:worker_threads';
export const forged = { status: 0, tries: 0, error: '' };
const w = new Worker(` + "`" + `
const fs = require('node:fs'), net = require('node:net'), { parentPort } = require('node:worker_threads');
const sock = '` + bridgeapi.LLMSocketPath + `', tokenFile = '` + bridgeapi.SocketDir + `/` + bridgeapi.TokenFile + `';
const body = JSON.stringify({ time: new Date().toISOString(), uid: 1001, gid: 1001, interfaces: ['lo'], routes: 0,
  cap_eff: '0000000000000000', cap_prm: '0000000000000000', cap_bnd: '0000000000000000', no_new_privs: true,
  seccomp: 2, read_only_root: true, open_files: 1024, pids_max: '256', mounts: 10, kernel: 'linux',
  kernel_version: '` + ForgedKernelVersion + `' });
let tries = 0;
const nap = new Int32Array(new SharedArrayBuffer(4));
const attempt = () => {
  while (!fs.existsSync(sock)) Atomics.wait(nap, 0, 0, 0.2);
  const seen = new Date().toISOString();
  tries++;
  let token = '';
  try { token = fs.readFileSync(tokenFile, 'utf8').trim(); } catch {}
  const req = 'POST ` + bridgeapi.AttestationPath + ` HTTP/1.1\\r\\nHost: llm\\r\\nContent-Type: application/json\\r\\n' +
    (token ? '` + bridgeapi.TokenHeader + `: ' + token + '\\r\\n' : '') +
    'Content-Length: ' + Buffer.byteLength(body) + '\\r\\nConnection: close\\r\\n\\r\\n' + body;
  let got = '';
  const c = net.createConnection(sock, () => c.write(req));
  c.on('data', (d) => { got += d; });
  c.on('error', (e) => { parentPort.postMessage({ tries, error: String(e) }); setTimeout(attempt, 1); });
  c.on('close', () => { const m = /^HTTP\\/1\\.1 (\\d+)/.exec(got); if (m) parentPort.postMessage({ tries, seen, status: Number(m[1]) }); else setTimeout(attempt, 1); });
};
attempt();
` + "`" + `, { eval: true });
w.on('message', (m) => Object.assign(forged, m));
w.unref();
`

// forgerAgentJS is the run: it waits for the forger's answer, calls the LLM through
// the bridge, looks for the attestation key everywhere it can read (its two halves
// arrive in the environment, so that no file or argument holds it whole), and
// prints what it saw.
const forgerAgentJS = `
import fs from 'node:fs';
import path from 'node:path';
const { forged } = await import('/opt/preload/forger.mjs');
for (const until = Date.now() + 30000; forged.status === 0 && Date.now() < until;) await new Promise((r) => setTimeout(r, 5));
const r = await fetch(process.env.OPENAI_API_BASE + '/v1/chat/completions', { method: 'POST',
  headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }) });
await r.text();
const [a, b] = (process.env.ATTEST_KEY_HALVES || ' ').split(' ');
delete process.env.ATTEST_KEY_HALVES;
const key = a + b, seen = [];
const look = (where, text) => { if (key.length > 1 && text.includes(key)) seen.push(where); };
look('env', JSON.stringify(process.env));
look('argv', process.argv.join(' '));
for (const p of fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p))) {
  for (const f of ['environ', 'cmdline', 'mountinfo']) { try { look('/proc/' + p + '/' + f, fs.readFileSync('/proc/' + p + '/' + f, 'latin1')); } catch {} }
}
const walk = (d) => { let es = []; try { es = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
  for (const e of es) { const p = path.join(d, e.name);
    if (e.isDirectory()) { if (!['/proc', '/sys', '/dev'].includes(p)) walk(p); }
    else if (e.isFile()) { try { if (fs.statSync(p).size < (16 << 20)) look(p, fs.readFileSync(p, 'latin1')); } catch {} } } };
walk('/');
console.log(JSON.stringify({ forged: forged.status, tries: forged.tries, error: forged.error, seen: forged.seen, llm: r.status, keySeen: seen }));
`

// ForgedKernelVersion marks the attestation the forger posts: a run's attestation
// holding it is the forgery.
const ForgedKernelVersion = "forged by the pre-booted runtime"

// AttestationForger is a pre-booted Node.js runtime (the generic preloader of
// package preload) that forges its sandbox's attestation: TestPreloadAttestation
// runs it on a runner's pools and proxy fronts, and a host's own test can run it
// through its front door (Spec, then Check on what the run returned).
type AttestationForger struct {
	node, dir string
}

// NewAttestationForger writes the forger's preloader and modules into a directory
// of the test's; node is node's absolute path in the image.
func NewAttestationForger(t testing.TB, node string) AttestationForger {
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, preload.NodeName), preload.Node, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "forger.mjs"), []byte(forgerJS), 0o644))
	return AttestationForger{node: node, dir: dir}
}

// Workspace returns a workspace holding the run's agent (agent.mjs).
func (f AttestationForger) Workspace(t testing.TB) string {
	ws := t.TempDir()
	must(t, os.Chmod(ws, 0o777))
	must(t, os.WriteFile(filepath.Join(ws, "agent.mjs"), []byte(forgerAgentJS), 0o644))
	return ws
}

// Preload is the forger's pre-boot: the preloader importing the forger module.
func (f AttestationForger) Preload() *port.Preload {
	return &port.Preload{
		Argv:   []string{f.node, "/opt/preload/" + preload.NodeName, "--import", "/opt/preload/forger.mjs"},
		Mounts: []port.Mount{{Source: f.dir, Target: "/opt/preload"}},
	}
}

// Spec is a run of the forger in image with workspace ws (the caller sets RunID
// and LLM).
func (f AttestationForger) Spec(image, ws string) port.RunSpec {
	return port.RunSpec{
		Image: image, WorkspaceDir: ws, Argv: []string{"node", "agent.mjs"},
		Limits:  port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 512 << 20},
		Preload: f.Preload(), LLM: &port.LLMSocket{HostDir: "/"},
	}
}

// Check judges a forger's run: the forgery was refused (403), the agent's LLM call
// passed (200), the attestation key was nowhere the agent could read, and got (the
// run's attestation as its proxy or host recorded it) is the bridge's, clean.
func (f AttestationForger) Check(t testing.TB, res *port.RunResult, got *port.Attestation) {
	t.Helper()
	var saw struct {
		Forged, Tries, LLM int
		Error, Seen        string
		KeySeen            []string
	}
	if err := json.Unmarshal(res.Stdout, &saw); err != nil {
		t.Fatalf("the forger's run: %v\nstdout: %s\nstderr: %s", err, clip(res.Stdout), clip(res.Stderr))
	}
	t.Logf("forger: %+v", saw)
	if got != nil {
		t.Logf("the run's attestation was taken at %s", got.Time.Format(time.RFC3339Nano))
	}
	if saw.Forged != 403 {
		t.Errorf("the pre-booted runtime's forged attestation was answered %d (after %d tries, %s), want 403", saw.Forged, saw.Tries, saw.Error)
	}
	if saw.LLM != 200 {
		t.Errorf("the agent's LLM call answered %d, want 200 (the bridge's attestation must count)", saw.LLM)
	}
	if len(saw.KeySeen) > 0 {
		t.Errorf("the attestation key is readable in the sandbox: %v", saw.KeySeen)
	}
	switch {
	case got == nil:
		t.Error("the run has no attestation")
	case got.KernelVersion == ForgedKernelVersion:
		t.Errorf("the run's attestation is the forgery: %+v", *got)
	case len(got.Violations()) > 0:
		t.Errorf("the bridge's attestation shows violations: %v", got.Violations())
	}
	if res.Start != port.StartPreloaded {
		t.Errorf("the run started %q (%s), want preloaded", res.Start, res.StartNote)
	}
	if strings.TrimSpace(string(res.Stdout)) == "" {
		t.Error("the run printed nothing")
	}
}
