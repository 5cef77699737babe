package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/sandboxgw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// The real OpenClaw gateway (2026.9.6) in a network=none session on each runtime,
// one gateway shared by the steps that can share it (start-ups take seconds):
// three concurrent runs billed to three accounts and reconciled; the LiteLLM key
// nowhere in the sandbox; loopback only; a host restart re-attaching by id; the
// gateway killed mid-run failing the run with a typed error, then restarted; a Sweep
// removing an abandoned session and nothing else; egress: a fetch from the gateway's
// sandbox through the egress proxy with a {{github_token}} placeholder reaches an
// allowlisted loopback HTTPS upstream with the real token, which is nowhere in the
// sandbox.
func TestOpenClawSandboxedGatewayDocker(t *testing.T) {
	testSandboxedGateway(t, dockerSessionRunner)
}

func TestOpenClawSandboxedGatewayContainerd(t *testing.T) {
	testSandboxedGateway(t, containerdSessionRunner)
}

type sessionRunner interface {
	port.SessionRunner
	port.Sweeper
}

func dockerSessionRunner(t testing.TB, bridgeBin, owner, sessDir string, opts ...docker.Option) (sessionRunner, string) {
	ctx := context.Background()
	cli := dockerClient(t)
	_, nodeBin := openClawInstall(t)
	ref, archive, err := testimages.NodeArchive(ctx, nodeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := testimages.EnsureDocker(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	r, err := docker.NewRunner(append([]docker.Option{docker.WithClient(cli), docker.WithBridge(bridgeBin), docker.WithOwner(owner), docker.WithSessionDir(sessDir)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r, ref
}

func containerdSessionRunner(t testing.TB, bridgeBin, owner, sessDir string, _ ...docker.Option) (sessionRunner, string) {
	ctx := context.Background()
	r, err := containerd.NewRunner(containerd.WithNamespace("agentsandbox-test"), containerd.WithBridge(bridgeBin), containerd.WithOwner(owner), containerd.WithSessionDir(sessDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	testenv.Need(t, "containerd", r.Ping(ctx) == nil, "no containerd reachable")
	_, nodeBin := openClawInstall(t)
	ref, archive, err := testimages.NodeArchive(ctx, nodeBin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	return r, ref
}

const gwModel = "gpt-4o-mini"

// gwStack is one runtime's sandboxed gateway and what it talks to.
type gwStack struct {
	fake   *litellmtest.Server
	router *billing.Router
	rec    *litellmspend.Reconciler
	runner sessionRunner
	image  string
	opts   sandboxgw.Options
	gw     *sandboxgw.Gateway
	canary string
	reopen func() sessionRunner // a new runner of the same owner: a restarted host

	// Egress: an allowlisted loopback HTTPS upstream and the token the proxy puts
	// into requests to it (a canary: it must appear nowhere in the sandbox).
	upstream *egresstest.Upstream
	ghToken  string
}

// gwEgressHost is the allowlisted upstream's name (resolved to loopback by the
// proxy's test resolver only).
const gwEgressHost = "api.gh.test"

func testSandboxedGateway(t *testing.T, newRunner func(testing.TB, string, string, string, ...docker.Option) (sessionRunner, string)) {
	appDir, _ := openClawInstall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	s := &gwStack{canary: "sk-canary-" + sandboxtest.RunID("litellm")}
	s.fake = litellmtest.NewServer(litellmtest.WithReply(markerReply), litellmtest.WithMasterKey(s.canary))
	t.Cleanup(s.fake.Close)
	// The router's upstream is the fake LiteLLM behind a shim that scripts one tool
	// call (web_fetch) for the egress turn.
	s.upstream = egresstest.NewUpstream(t, true, gwEgressHost)
	llm := httptest.NewServer(toolCallingLLM(t, s.fake.URL, "https://"+gwEgressHost+":"+s.upstream.Port()+egressAgentPath))
	t.Cleanup(llm.Close)
	var err error
	s.router, err = billing.NewRouter(llm.URL, s.fake.MasterKey())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := litellm.New(litellm.WithBaseURL(s.fake.URL), litellm.WithMasterKey(s.fake.MasterKey()))
	if err != nil {
		t.Fatal(err)
	}
	if s.rec, err = litellmspend.NewReconciler(lc, litellmspend.WithPollInterval(100*time.Millisecond, time.Second)); err != nil {
		t.Fatal(err)
	}
	sessDir := t.TempDir()
	owner := testenv.Owner(sandboxtest.RunID("ocgw"))
	s.runner, s.image = newRunner(t, bin, owner, sessDir)
	// The restarted host's runner, made now so that it is closed after the gateway.
	second, _ := newRunner(t, bin, owner, sessDir)
	s.reopen = func() sessionRunner { return second }
	s.ghToken = "ghp-canary-" + sandboxtest.RunID("gh")
	resolver := egresstest.NewResolver()
	resolver.Set(gwEgressHost, egresstest.Loopback)
	s.opts = sandboxgw.Options{
		Runner: s.runner, Router: s.router, Image: s.image,
		Command: []string{testimages.NodeBinary, testimages.AppDir + "/node_modules/openclaw/openclaw.mjs"},
		Mounts:  []port.Mount{{Source: appDir, Target: testimages.AppDir}},
		Dir:     t.TempDir(),
		Models:  []openclaw.Model{{ID: gwModel, ContextWindow: 32000, MaxTokens: 1024}},
		Config: []openclaw.Option{openclaw.WithAgentTimeout(150 * time.Second),
			// web_fetch goes through the proxy variables (the sandbox has no DNS) and
			// sends the placeholder, never a secret: the proxy puts the token in.
			openclaw.WithSetting("tools.web.fetch.useTrustedEnvProxy", true),
			openclaw.WithSetting("tools.web.fetch.headers", map[string]string{"Authorization": "Bearer {{github_token}}"}),
		},
		RunID:  sandboxtest.RunID("ocgw"),
		Limits: port.Limits{Timeout: 30 * time.Minute},
		// A dead gateway comes back by itself.
		AutoRestart: true, MinBackoff: 500 * time.Millisecond,
		// About 45 s quiet; 3.5 minutes under the whole suite's load, near the
		// 5-minute default.
		ReadyTimeout: 10 * time.Minute,
		Egress: &port.EgressPolicy{
			Providers: []port.EgressProvider{{
				ID: "github", URIs: []string{"https://" + gwEgressHost + ":" + s.upstream.Port() + "/repos/"},
				Credentials: []string{"github_token"},
			}},
			Credentials: port.CredentialFunc(func(_ context.Context, _, provider, name string) (string, error) {
				if provider != "github" || name != "github_token" {
					return "", errors.New("no such credential")
				}
				return s.ghToken, nil
			}),
		},
		EgressResolver:      resolver,
		EgressUpstreamRoots: s.upstream.PEM,
		EgressUnsafeAllow:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}
	start := time.Now()
	s.gw, err = sandboxgw.Start(ctx, s.opts)
	if err != nil {
		t.Fatalf("starting the sandboxed gateway: %v", err)
	}
	t.Logf("sandboxed gateway ready in %v", time.Since(start))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = s.gw.Close(cctx)
		rep, err := s.runner.Sweep(cctx, port.SweepOptions{})
		if err != nil || len(rep.Removed) > 0 {
			t.Errorf("left behind after Close: %v %v", rep.Removed, err)
		}
	})

	steps := []struct {
		name string
		fn   func(*testing.T, *gwStack)
	}{
		{"ThreeConcurrentRunsBilledPerRun", testGWConcurrentRuns},
		{"EgressInjectsTokenForAllowlistedHost", testGWEgress},
		{"AgentTurnFetchesThroughEgress", testGWEgressAgent},
		{"KeysNowhereInSandbox", testGWNoKey},
		{"LoopbackOnly", testGWLoopbackOnly},
		{"HostRestartReattaches", testGWReattach},
		{"KillMidRunTypedErrorThenRestart", testGWKill},
		{"SweepRemovesOnlyAbandoned", testGWSweep},
	}
	for _, st := range steps {
		if !t.Run(st.name, func(t *testing.T) { st.fn(t, s) }) {
			break // later steps need the gateway the failed one left
		}
	}
}

func (s *gwStack) register(t *testing.T, marker, account string) *billing.Registration {
	t.Helper()
	reg, err := s.router.Register(billing.Run{
		RunID: sandboxtest.RunID("gwrun-" + strings.ToLower(marker)), Attempt: 1,
		Attribution: port.Attribution{BillingAccountID: account, UserID: "user-" + marker, GraphID: "g"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func (s *gwStack) turn(ctx context.Context, reg *billing.Registration, marker string) (string, error) {
	res, err := s.gw.Run(ctx, sandboxgw.RunRequest{
		Registration: reg, SessionKey: "sess-" + reg.RunID(), Model: gwModel,
		Message: "Reply with the code word only. MARKER=" + marker, Timeout: 120 * time.Second,
	})
	if err != nil {
		return "", err
	}
	if res.Status != "ok" {
		return res.Text, fmt.Errorf("status %q: %s", res.Status, res.Summary)
	}
	return strings.TrimSpace(res.Text), nil
}

func testGWConcurrentRuns(t *testing.T, s *gwStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type side struct {
		marker, account string
		reg             *billing.Registration
		answer          string
		err             error
	}
	sides := []*side{{marker: "ALPHA", account: "acct-a"}, {marker: "BRAVO", account: "acct-b"}, {marker: "CHARLIE", account: "acct-c"}}
	since := time.Now()
	for _, sd := range sides {
		sd.reg = s.register(t, sd.marker, sd.account)
	}
	var wg sync.WaitGroup
	for _, sd := range sides {
		wg.Go(func() { sd.answer, sd.err = s.turn(ctx, sd.reg, sd.marker) })
	}
	wg.Wait()
	for _, sd := range sides {
		if sd.err != nil || sd.answer != "ANSWER-"+sd.marker {
			t.Errorf("%s: answer %q, %v", sd.marker, sd.answer, sd.err)
		}
	}
	if n := s.router.Stats().Unattributed; n != 0 {
		t.Errorf("%d unattributed calls: %+v", n, s.router.Unattributed())
	}
	// At LiteLLM: each call carries the account of the run whose marker it holds.
	for _, rq := range s.fake.Requests() {
		if !strings.HasSuffix(rq.Path, "/chat/completions") {
			continue
		}
		m := oneShotMarker.FindSubmatch(rq.Body)
		if m == nil {
			t.Errorf("a call without a marker reached LiteLLM")
			continue
		}
		for _, sd := range sides {
			if string(m[1]) == sd.marker && rq.Header.Get("X-Litellm-End-User-Id") != sd.account {
				t.Errorf("%s's call billed to %q", sd.marker, rq.Header.Get("X-Litellm-End-User-Id"))
			}
		}
	}
	// Each run reconciled: every audited call has its billing row, for its account.
	for _, sd := range sides {
		recs, err := sd.reg.Stop(ctx)
		if err != nil || len(recs) == 0 {
			t.Fatalf("%s: audit %v, %v", sd.marker, recs, err)
		}
		rc, err := s.rec.Reconcile(ctx, port.ReconcileRequest{
			RunID: sd.reg.RunID(), Attempt: 1, BillingAccountID: sd.account,
			Since: since, Until: time.Now(), Calls: recs,
		})
		if err != nil {
			t.Fatalf("%s: reconcile: %v", sd.marker, err)
		}
		if len(rc.Missing) > 0 || rc.Total.Calls != len(recs) || rc.Total.TotalTokens == 0 {
			t.Errorf("%s: reconciled %+v missing %v for %d audited calls", sd.marker, rc.Total, rc.Missing, len(recs))
		}
	}
}

// nodeExec runs a node script in the gateway's sandbox.
func (s *gwStack) nodeExec(t *testing.T, script string, args ...string) *port.ExecResult {
	t.Helper()
	sess := s.gw.Session()
	if sess == nil {
		t.Fatal("the gateway is down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sess.Exec(ctx, port.ExecSpec{Argv: append([]string{testimages.NodeBinary, "-e", script}, args...), Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	return res
}

// scanScript looks for the secrets (each given in two halves, so its own command line
// does not hold them) in every process's environ and cmdline and every readable file
// but /proc, /sys, /dev and the read-only OpenClaw tree; prints "found <where>" per hit.
const scanScript = `
const fs = require('fs'), path = require('path');
const secrets = [];
for (let i = 1; i + 1 < process.argv.length; i += 2) secrets.push(process.argv[i] + process.argv[i + 1]);
const has = b => secrets.some(s => b.includes(s));
let hits = 0, files = 0;
const hit = w => { hits++; console.log('found', w); };
if (Object.values(process.env).some(has)) hit('env');
for (const p of fs.readdirSync('/proc')) {
  if (!/^\d+$/.test(p) || +p === process.pid) continue;
  for (const f of ['environ', 'cmdline']) {
    try { if (has(fs.readFileSync('/proc/' + p + '/' + f))) hit('/proc/' + p + '/' + f); } catch {}
  }
}
const skip = new Set(['/proc', '/sys', '/dev', '/opt/app']);
const walk = d => {
  let ents; try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
  for (const e of ents) {
    const p = path.join(d, e.name);
    if (skip.has(p)) continue;
    if (e.isDirectory()) walk(p);
    else if (e.isFile()) {
      try { const st = fs.statSync(p); if (st.size > 16 << 20) continue; files++; if (has(fs.readFileSync(p))) hit(p); } catch {}
    }
  }
};
walk('/');
console.log('scanned', files, 'hits', hits);
`

// testGWNoKey scans for the LiteLLM key and the egress token (after the egress step
// used it) in one pass: the sandbox's processes (env, argv) and files (the gateway's
// config and state dir included), the host side of its directory, its output.
func testGWNoKey(t *testing.T, s *gwStack) {
	var args []string
	for _, sec := range []string{s.canary, s.ghToken} {
		args = append(args, sec[:len(sec)/2], sec[len(sec)/2:])
	}
	res := s.nodeExec(t, scanScript, args...)
	out := string(res.Stdout)
	if !strings.Contains(out, "hits 0") || strings.Contains(out, "found") {
		t.Errorf("the LiteLLM key or the egress token is visible in the sandbox:\n%s\n%s", out, res.Stderr)
	}
	if !strings.Contains(out, "scanned") {
		t.Fatalf("the scan did not run: %s %s", out, res.Stderr)
	}
	t.Logf("in-sandbox scan: %s", strings.TrimSpace(out))
	// The gateway's state directory and everything else on the host side of it.
	err := filepath.WalkDir(s.opts.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && (bytes.Contains(b, []byte(s.canary)) || bytes.Contains(b, []byte(s.ghToken))) {
			t.Errorf("the LiteLLM key or the egress token is in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sess := s.gw.Session()
	out1, err1 := sess.Logs()
	for _, sec := range []string{s.canary, s.ghToken} {
		if bytes.Contains(out1, []byte(sec)) || bytes.Contains(err1, []byte(sec)) {
			t.Error("the LiteLLM key or the egress token is in the gateway's output")
		}
	}
}

const netScript = `
const os = require('os'), net = require('net');
console.log('ifaces', Object.keys(os.networkInterfaces()).sort().join(','));
const [host, port] = [process.argv[1], +process.argv[2]];
const c = net.connect({ host, port, timeout: 3000 });
c.on('connect', () => { console.log('CONNECTED'); process.exit(0); });
c.on('timeout', () => { console.log('refused TIMEOUT'); process.exit(0); });
c.on('error', e => { console.log('refused', e.code); process.exit(0); });
`

func testGWLoopbackOnly(t *testing.T, s *gwStack) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	p := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var ips []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ips = append(ips, n.IP.String())
		}
	}
	if len(ips) == 0 {
		t.Fatal("no non-loopback host address to try")
	}
	for _, ip := range ips {
		res := s.nodeExec(t, netScript, ip, p)
		out := string(res.Stdout)
		if !strings.Contains(out, "ifaces lo\n") {
			t.Errorf("interfaces inside the gateway's sandbox: %s", out)
		}
		if !strings.Contains(out, "refused") || strings.Contains(out, "CONNECTED") {
			t.Errorf("connect to %s:%s from the gateway's sandbox: %s %s", ip, p, out, res.Stderr)
		}
	}
	select {
	case <-accepted:
		t.Error("the host accepted a connection from the gateway's sandbox")
	default:
	}
	if a := s.gw.Attestation(); len(a) == 0 || !bytes.Contains(a, []byte(`"lo"`)) {
		t.Logf("bridge attestation: %s", a)
	}
}

func testGWReattach(t *testing.T, s *gwStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id, token := s.gw.ID(), s.gw.Token()
	if id == "" {
		t.Fatal("no session id")
	}
	// The host process goes away: the connection and the router's socket with it;
	// the sandbox keeps running.
	if err := s.gw.Detach(); err != nil {
		t.Fatal(err)
	}
	opts := s.opts
	opts.Token = token
	// A new process: a new runner of the same owner and session directory.
	opts.Runner = s.reopen()
	gw, err := sandboxgw.Attach(ctx, opts, id)
	if err != nil {
		t.Fatalf("re-attach by id: %v", err)
	}
	s.gw = gw
	if s.gw.ID() != id {
		t.Errorf("re-attached to %s, want %s", s.gw.ID(), id)
	}
	reg := s.register(t, "DELTA", "acct-d")
	if got, err := s.turn(ctx, reg, "DELTA"); err != nil || got != "ANSWER-DELTA" {
		t.Errorf("turn after re-attach: %q, %v", got, err)
	}
	if recs, err := reg.Stop(ctx); err != nil || len(recs) == 0 {
		t.Errorf("audit after re-attach: %v, %v", recs, err)
	}
}

// killScript SIGKILLs every process of the gateway (not itself, not the init).
const killScript = `
const fs = require('fs');
for (const p of fs.readdirSync('/proc')) {
  if (!/^\d+$/.test(p) || +p === process.pid || p === '1' || +p === process.ppid) continue;
  try {
    const c = fs.readFileSync('/proc/' + p + '/cmdline', 'utf8');
    if (c.includes('openclaw') && !c.includes('readdirSync')) { process.kill(+p, 'SIGKILL'); console.log('killed', p); }
  } catch {}
}
`

func testGWKill(t *testing.T, s *gwStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The LLM hangs, so the run is in flight when the gateway dies.
	s.fake.SetLatency(time.Minute)
	reg := s.register(t, "ECHO", "acct-e")
	type outcome struct {
		answer string
		err    error
		at     time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		a, err := s.turn(ctx, reg, "ECHO")
		done <- outcome{a, err, time.Now()}
	}()
	// Wait until the call reached the upstream.
	deadline := time.Now().Add(2 * time.Minute)
	for !sawMarker(s.fake, "ECHO") {
		if time.Now().After(deadline) {
			t.Fatal("the run never reached the LLM")
		}
		time.Sleep(100 * time.Millisecond)
	}
	sess := s.gw.Session()
	// The goroutines of this incarnation (its gateway client, supervision, session);
	// each must end once the gateway died, while the next incarnation has its own.
	incarnation := testenv.Goroutines(
		"github.com/agentsandbox/sandbox/openclaw/gateway.",
		"github.com/agentsandbox/sandbox/openclaw/sandboxgw.",
		"github.com/agentsandbox/sandbox/internal/runner/session.")
	for id, stack := range incarnation {
		// The Gateway's own goroutines outlive incarnations by design: its supervisor
		// and the router's server on the socket directory.
		if strings.Contains(stack, "sandboxgw.(*Gateway).supervise") || strings.Contains(stack, "net/http.(*Server).Serve") {
			delete(incarnation, id)
		}
	}
	res := s.nodeExec(t, killScript)
	killed := time.Now()
	if !strings.Contains(string(res.Stdout), "killed") {
		t.Fatalf("nothing killed: %s %s", res.Stdout, res.Stderr)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not fail within 30 seconds of the kill")
	}
	s.fake.SetLatency(0)
	var de *sandboxgw.DownError
	if !errors.Is(o.err, sandboxgw.ErrGatewayDown) || !errors.As(o.err, &de) || de.RunID != reg.RunID() {
		t.Fatalf("the run in flight ended with %q, %v; want a DownError naming %s", o.answer, o.err, reg.RunID())
	}
	t.Logf("run failed %v after the kill: %v", o.at.Sub(killed), o.err)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	r, err := sess.Wait(wctx)
	wcancel()
	if r == nil || r.ExitCode == 0 {
		t.Errorf("the handle did not report the gateway's exit: %+v, %v", r, err)
	}
	if _, err := s.gw.Run(ctx, sandboxgw.RunRequest{Registration: reg, SessionKey: "x", Model: gwModel, Message: "m"}); !errors.Is(err, sandboxgw.ErrGatewayDown) {
		t.Errorf("a run while down: %v, want ErrGatewayDown", err)
	}
	_, _ = reg.Stop(ctx)

	// AutoRestart brings a new sandbox up.
	if err := s.gw.WaitUp(ctx); err != nil {
		t.Fatalf("no restart: %v", err)
	}
	if s.gw.ID() == sess.ID() {
		t.Error("the restarted gateway has the dead one's id")
	}
	reg2 := s.register(t, "FOXTROT", "acct-f")
	if got, err := s.turn(ctx, reg2, "FOXTROT"); err != nil || got != "ANSWER-FOXTROT" {
		t.Errorf("turn after restart: %q, %v", got, err)
	}
	recs, err := reg2.Stop(ctx)
	if err != nil || len(recs) == 0 {
		t.Errorf("audit after restart: %v, %v", recs, err)
	}
	// No goroutine of the dead incarnation lingers (the new one has its own).
	testenv.WaitGone(t, incarnation, 15*time.Second)
}

func sawMarker(fake *litellmtest.Server, marker string) bool {
	for _, rq := range fake.Requests() {
		if strings.Contains(string(rq.Body), "MARKER="+marker) {
			return true
		}
	}
	return false
}

func testGWSweep(t *testing.T, s *gwStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// An abandoned session of the same owner: its host went away an hour ago.
	abandoned, err := s.runner.Start(ctx, port.SessionSpec{
		RunSpec: port.RunSpec{RunID: sandboxtest.RunID("abandoned"), Image: s.image, Argv: []string{testimages.NodeBinary, "-e", "setInterval(() => {}, 1e9)"}},
		Expose:  []int{9999},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := abandoned.Expose(9999)
	if err != nil {
		t.Fatal(err)
	}
	if err := abandoned.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := session.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	rep, err := s.runner.Sweep(ctx, port.SweepOptions{OlderThan: 10 * time.Minute})
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("Sweep: %+v, %v", rep, err)
	}
	var containers []string
	for _, r := range rep.Removed {
		if strings.HasPrefix(r, "container:") {
			containers = append(containers, r)
		}
	}
	if len(containers) != 1 || !strings.HasSuffix(containers[0], abandoned.ID()) {
		t.Errorf("Sweep removed %v, want only the abandoned session %s", rep.Removed, abandoned.ID())
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(p))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the abandoned session's directory survived: %v", err)
	}
	// The gateway is untouched.
	reg := s.register(t, "GOLF", "acct-g")
	if got, err := s.turn(ctx, reg, "GOLF"); err != nil || got != "ANSWER-GOLF" {
		t.Errorf("turn after the sweep: %q, %v", got, err)
	}
	_, _ = reg.Stop(ctx)
}

// egressScript runs in the gateway's sandbox with the gateway's environment: Node's
// fetch (through HTTPS_PROXY, NODE_USE_ENV_PROXY and NODE_EXTRA_CA_CERTS) with a
// {{github_token}} placeholder; a fetch to a host no provider allows; the same host in
// forward-proxy form to read the denial; and the gateway process's own proxy variables.
const egressScript = `
const fs = require('fs'), http = require('http');
const [url, denied] = [process.argv[1], process.argv[2]];
(async () => {
  const r = await fetch(url, { headers: { Authorization: 'Bearer {{github_token}}' } });
  console.log('STATUS', r.status);
  console.log('BODY', (await r.text()).replace(/\n/g, ' '));
  try { const d = await fetch('https://' + denied + '/x'); console.log('DENIED-FETCH', d.status); }
  catch (e) { console.log('DENIED-FETCH-FAILED', (e.cause && (e.cause.code || e.cause.message)) || e.message); }
  await new Promise(done => {
    const req = http.request({ host: '127.0.0.1', port: 3128, path: 'http://' + denied + '/x', headers: { Host: denied } }, res => {
      let b = ''; res.on('data', d => b += d); res.on('end', () => { console.log('FORWARD', res.statusCode, b.trim()); done(); });
    });
    req.on('error', e => { console.log('FORWARD-ERROR', e.message); done(); });
    req.end();
  });
  for (const p of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || +p === process.pid) continue;
    try {
      if (!fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').includes('gateway')) continue;
      const env = fs.readFileSync('/proc/' + p + '/environ', 'utf8').split('\0');
      console.log('GWENV', ['HTTPS_PROXY=http://127.0.0.1:3128', 'NODE_USE_ENV_PROXY=1', 'NODE_EXTRA_CA_CERTS=/llm-sock/egress-ca.pem'].every(v => env.includes(v)));
    } catch {}
  }
})().catch(e => console.log('ERROR', e.message, e.cause && e.cause.message));
`

// testGWEgress: the last acceptance bullet of the sandboxed gateway. The request is
// made by the gateway's own Node binary through Session.Exec inside the running
// gateway sandbox (same environment as the gateway process, same bridge, same egress
// socket), not by an agent turn: the fake LLM cannot script a tool call. The upstream
// must receive the real token; the agent sees the placeholder (reflection guard); a
// host no provider allows gets the 403 egress_denied JSON; the audit has both.
func testGWEgress(t *testing.T, s *gwStack) {
	url := "https://" + gwEgressHost + ":" + s.upstream.Port() + "/repos/acme/app"
	res := s.nodeExec(t, egressScript, url, "evil.test")
	out := string(res.Stdout)
	t.Logf("egress from the gateway's sandbox:\n%s%s", out, res.Stderr)
	if !strings.Contains(out, "STATUS 200\n") {
		t.Fatalf("the allowlisted fetch did not succeed:\n%s\n%s", out, res.Stderr)
	}
	seen := s.upstream.Seen()
	if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+s.ghToken || seen[0].Path != "/repos/acme/app" {
		t.Errorf("the upstream saw %+v; want one request to /repos/acme/app with the real token", seen)
	}
	// The echo carried the token back: the agent sees the placeholder instead.
	if strings.Contains(out, s.ghToken) || !strings.Contains(out, "Bearer {{github_token}}") {
		t.Errorf("the echoed token reached the sandbox unredacted:\n%s", out)
	}
	if !strings.Contains(out, "DENIED-FETCH-FAILED") {
		t.Errorf("a fetch to a host no provider allows did not fail:\n%s", out)
	}
	var denial struct {
		Error struct{ Type, Guard, Target string }
	}
	_, fwd, _ := strings.Cut(out, "FORWARD 403 ")
	fwd, _, _ = strings.Cut(fwd, "\n")
	if err := json.Unmarshal([]byte(fwd), &denial); err != nil || denial.Error.Type != "egress_denied" || denial.Error.Guard != port.GuardAllowlist || denial.Error.Target != "evil.test" {
		t.Errorf("no 403 egress_denied (allowlist, evil.test) for a host no provider allows (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "GWENV true") || strings.Contains(out, "GWENV false") {
		t.Errorf("the gateway process lacks the proxy and CA variables:\n%s", out)
	}
	var ok, denied int
	for _, r := range s.gw.EgressAudit() {
		switch {
		case r.Provider == "github" && r.Mode == "mitm" && r.Status == 200 && r.Host == gwEgressHost && r.Guard == "":
			ok++
		case r.Guard == port.GuardAllowlist && r.Host == "evil.test":
			denied++
		}
	}
	if ok != 1 || denied != 2 {
		t.Errorf("egress audit: %d forwarded, %d denied, want 1 and 2: %+v", ok, denied, s.gw.EgressAudit())
	}
}

// egressMarker is the marker of the turn whose first model call the shim answers with
// a web_fetch tool call.
const egressMarker = "EGRESS"

// egressAgentPath is what that tool call fetches on the allowlisted upstream.
const egressAgentPath = "/repos/acme/agent"

// toolCallingLLM passes everything to the fake LiteLLM except the first model call of
// the egress turn (its marker, no tool result yet), which it answers with a web_fetch
// tool call for the allowlisted upstream, streamed or not as asked.
func toolCallingLLM(t *testing.T, fakeURL, target string) http.Handler {
	u, err := url.Parse(fakeURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // the kill step cuts a call on purpose
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			rp.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		hasTool := false
		for _, m := range req.Messages {
			hasTool = hasTool || m.Role == "tool"
		}
		if !bytes.Contains(body, []byte("MARKER="+egressMarker)) || hasTool {
			rp.ServeHTTP(w, r)
			return
		}
		// OpenClaw 2026.9.6 puts most tools behind Tool Search: web_fetch is called
		// through tool_call.
		args, _ := json.Marshal(map[string]any{"id": "web_fetch", "args": map[string]string{"url": target}})
		call := map[string]any{"index": 0, "id": "callegress1", "type": "function",
			"function": map[string]any{"name": "tool_call", "arguments": string(args)}}
		usage := map[string]any{"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
		base := map[string]any{"id": "chatcmpl-egress", "created": time.Now().Unix(), "model": req.Model}
		if !req.Stream {
			base["object"] = "chat.completion"
			base["choices"] = []any{map[string]any{"index": 0, "finish_reason": "tool_calls",
				"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}}}}
			base["usage"] = usage
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(base)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(v map[string]any) {
			v["id"], v["created"], v["model"], v["object"] = base["id"], base["created"], base["model"], "chat.completion.chunk"
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "finish_reason": nil,
			"delta": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}}}}})
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "delta": map[string]any{}}}, "usage": usage})
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// testGWEgressAgent: a real agent turn through the gateway. The model (scripted by
// the shim) calls OpenClaw's web_fetch (through Tool Search's tool_call) on the
// allowlisted upstream; the gateway's config holds only the header with the
// placeholder (tools.web.fetch.headers) and lets web_fetch use the proxy variables
// (tools.web.fetch.useTrustedEnvProxy); the upstream receives the real token; the
// tool result the model sees has the placeholder back (reflection guard).
func testGWEgressAgent(t *testing.T, s *gwStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := len(s.upstream.Seen())
	reg := s.register(t, egressMarker, "acct-egress")
	got, err := s.turn(ctx, reg, egressMarker)
	_, _ = reg.Stop(ctx)
	var fetched []egresstest.Seen
	for _, sn := range s.upstream.Seen()[before:] {
		if sn.Path == egressAgentPath {
			fetched = append(fetched, sn)
		}
	}
	if len(fetched) == 0 {
		out, errOut := s.gw.Session().Logs()
		var calls []string
		for _, r := range s.fake.Requests() {
			if bytes.Contains(r.Body, []byte("MARKER="+egressMarker)) {
				calls = append(calls, r.Path+" "+tailBytes(r.Body))
			}
		}
		t.Fatalf("the agent's web_fetch never reached the upstream (answer %q, %v)\naudit: %+v\nmodel calls: %s\ngateway stderr: %s\nstdout: %s", got, err, s.gw.EgressAudit(), calls, tailBytes(errOut), tailBytes(out))
	}
	for _, sn := range fetched {
		if sn.Header.Get("Authorization") != "Bearer "+s.ghToken {
			t.Errorf("the upstream got Authorization %q, want the real token", sn.Header.Get("Authorization"))
		}
	}
	if err != nil || got != "ANSWER-"+egressMarker {
		t.Errorf("the egress turn answered %q, %v", got, err)
	}
	// The tool result went to the model: the upstream's echo with the placeholder
	// back in place of the token, which never reaches the LLM.
	sawResult := false
	for _, r := range s.fake.Requests() {
		if bytes.Contains(r.Body, []byte(s.ghToken)) {
			t.Error("the token reached the LLM")
		}
		sawResult = sawResult || (bytes.Contains(r.Body, []byte("callegress1")) && bytes.Contains(r.Body, []byte(egressAgentPath)) && bytes.Contains(r.Body, []byte("Bearer {{github_token}}")))
	}
	if !sawResult {
		t.Error("the tool result (the echo, redacted) never reached the model")
	}
	n := 0
	for _, r := range s.gw.EgressAudit() {
		if r.Provider == "github" && r.Mode == "mitm" && r.Path == egressAgentPath && r.Status == 200 && r.Reflected > 0 {
			n++
		}
	}
	if n != len(fetched) {
		t.Errorf("egress audit: %d records of the agent's fetch, want %d: %+v", n, len(fetched), s.gw.EgressAudit())
	}
}

func tailBytes(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
