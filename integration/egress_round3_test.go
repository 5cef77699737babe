package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
)

//go:embed testdata/egress-round3.js
var egressRound3Agent []byte

func TestEgressRound3Docker(t *testing.T)     { testEgressRound3(t, dockerRunnerFor) }
func TestEgressRound3Containerd(t *testing.T) { testEgressRound3(t, containerdRunnerFor) }

// oracleStep is how long the hostile upstream pauses after each guess.
const oracleStep = 300 * time.Millisecond

// testEgressRound3 is round 3 of the hostile egress run, in a real sandbox, three runs:
// A (the timing oracle on the reflection guard, a gzip bomb, the credential in
// zero-padded HTML references, 10,500 credentialed requests, a chunked body broken in
// the middle of the echoed credential and the withdrawal after it, SSRF attempts
// hidden in a flood), B (names that rebind to a loopback canary through the host's
// upstream proxy, a burst over the request rate) and C (requests with 60 KiB headers
// on a byte cap). About 40 s per runtime, 100 s with -race.
func testEgressRound3(t *testing.T, runnerFor func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	nodeBin := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", nodeBin != "", "NODE24_BIN is not set (eval \"$(bash scripts/install-openclaw.sh)\")")
	testenv.NeedCommand(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := runnerFor(t, bin, func(ctx context.Context) (string, []byte, error) { return testimages.NodeArchive(ctx, nodeBin) })

	var rebindNames []string
	for i := range 5 {
		rebindNames = append(rebindNames, fmt.Sprintf("r%d.test", i), fmt.Sprintf("t%d.test", i))
	}
	up := egresstest.NewUpstream(t, true, rebindNames...)
	var headBytes atomic.Int64
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 200 {
		zw.Write(zero)
	}
	zw.Close()
	plain := egresstest.NewUpstream(t, false)
	plain.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headBytes.Add(int64(len(r.URL.RequestURI()) + len(r.Header.Get("X-Pad"))))
		switch r.URL.Path {
		case "/oracle":
			io.WriteString(w, "G"+r.URL.Query().Get("g"))
			w.(http.Flusher).Flush()
			time.Sleep(oracleStep)
			io.WriteString(w, "\nend\n")
		case "/bomb":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		case "/echo-html":
			io.WriteString(w, "token=")
			for _, c := range strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") {
				fmt.Fprintf(w, "&#%010d;", c)
			}
		case "/echo-cut":
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			part := "token=" + tok[:len(tok)-4]
			fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(part)+20, part)
			brw.Flush()
		default:
			io.WriteString(w, "ok")
		}
	})
	res := egresstest.NewResolver()
	for _, n := range []string{"oracle.test", "docs.test", "evil.test"} {
		res.Set(n, egresstest.Loopback)
	}
	// Run B's names: the first answer is the allowed upstream, every later one the
	// loopback canary, listening on the same ports at 127.0.0.2.
	rebind := []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	for i := range 5 {
		for _, n := range []string{"r%d.test", "p%d.test", "t%d.test"} {
			res.Set(fmt.Sprintf(n, i), egresstest.Loopback, rebind)
		}
	}
	canaries := []*egresstest.Canary{egresstest.NewCanary(t, "127.0.0.2:"+up.Port()), egresstest.NewCanary(t, "127.0.0.2:"+plain.Port())}
	fwd := egresstest.NewForwardProxy(t, res)
	llm := httptest.NewServer(http.NotFoundHandler())
	defer llm.Close()

	rig := newEgressRig(ctx, t, runner, testenv.Owner("egress3-it"), res, up.PEM, llm.URL, egressRound3Agent)
	sb, logs := rig.sb, rig.logs
	run := func(mode string, pol *port.EgressPolicy) (*sandbox.Result, map[string]json.RawMessage) {
		t.Helper()
		ws := t.TempDir()
		require.NoError(t, os.Chmod(ws, 0o777))
		result, err := sb.Run(ctx, sandbox.Request{
			Grant: sandbox.Grant{AllowSandbox: true}, RunID: testRunID("egress3" + mode), Image: image,
			Argv:         []string{testimages.NodeBinary, testimages.AppDir + "/agent.js"},
			Env:          map[string]string{"MODE": mode, "UP_PORT": up.Port(), "PLAIN_PORT": plain.Port(), "KNOWN": "ghp_"},
			WorkspaceDir: ws,
			Mounts:       rig.mounts,
			Attribution:  port.Attribution{BillingAccountID: "acct-egress3"},
			Limits:       port.Limits{Timeout: 4 * time.Minute},
			Egress:       pol,
		})
		require.NoError(t, err)
		require.Equal(t, 0, result.Run.ExitCode, "stdout: %.2000s\nstderr: %s", result.Run.Stdout, result.Run.Stderr)
		var out map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(result.Run.Stdout, &out), "stdout: %.2000s", result.Run.Stdout)
		all, _ := json.Marshal(result)
		for what, s := range map[string]string{"stdout": string(result.Run.Stdout), "stderr": string(result.Run.Stderr), "result": string(all), "logs": logs.String()} {
			assert.NotContains(t, s, egressCanary[4:], "the canary is in the %s", what)
		}
		return result, out
	}
	field := func(out map[string]json.RawMessage, name string, v any) {
		t.Helper()
		require.NoError(t, json.Unmarshal(out[name], v), "%s: %s", name, out[name])
	}

	// Run A.
	resA, outA := run("a", &port.EgressPolicy{Providers: []port.EgressProvider{
		{ID: "oracle", URIs: []string{"http://oracle.test:" + plain.Port() + "/"}, Credentials: []string{"token"}},
		{ID: "docs", URIs: []string{"http://docs.test:" + plain.Port() + "/"}},
	}, MaxRunBytes: 32 << 20, Rate: port.EgressRate{RPS: 1e9, Burst: 1 << 30}})

	// 1. The oracle: at every position the agent sees every candidate the same way.
	var oracle [][]struct {
		G, Body string
		Early   bool
		Status  int
	}
	field(outA, "oracle", &oracle)
	require.Len(t, oracle, 4)
	for pos, cands := range oracle {
		seen := map[string][]string{}
		for _, c := range cands {
			key := fmt.Sprintf("status %d early %v body %q", c.Status, c.Early, c.Body)
			seen[key] = append(seen[key], c.G)
		}
		assert.Len(t, seen, 1, "position %d: the agent tells candidates apart: %v", pos, seen)
		for key := range seen {
			assert.Equal(t, `status 200 early false body "G<guess>\nend\n"`, key, "position %d", pos)
		}
	}
	// 2. The bomb is cut.
	var bombOut struct {
		Status, Bytes int
		Error         string
	}
	field(outA, "bomb", &bombOut)
	assert.Less(t, bombOut.Bytes, 16<<20, "the bomb reached the agent: %+v", bombOut)
	// 2b. Zero-padded references are caught; credentialed records are bounded.
	var htmlOut struct {
		Status int
		Body   string
	}
	field(outA, "html", &htmlOut)
	assert.Equal(t, 200, htmlOut.Status)
	assert.NotContains(t, html.UnescapeString(htmlOut.Body), egressCanary[4:], "zero-padded references passed: %q", htmlOut.Body)
	var credCounts map[string]int
	field(outA, "credentialed", &credCounts)
	assert.Equal(t, 10500, credCounts["200"], "%v", credCounts)
	credRecs, firstCred, lastCred := 0, false, false
	for _, r := range resA.Egress {
		if strings.HasPrefix(r.Path, "/cred/") {
			credRecs++
			firstCred = firstCred || r.Path == "/cred/0"
			lastCred = lastCred || r.Path == "/cred/10499"
		}
	}
	t.Logf("credentialed: %d of 10,500 kept, summary %+v", credRecs, resA.EgressSummary)
	assert.LessOrEqual(t, credRecs, 10000, "credentialed records are unbounded")
	assert.True(t, firstCred && lastCred, "the first and the last credentialed request are kept")
	// 3. The broken body shows no run of the credential; the credential is then
	//    withdrawn, requests without one still pass.
	var cut struct {
		Status      int
		Body, Guard string
		Error       string
	}
	field(outA, "cut", &cut)
	for i := 0; i+16 <= len(egressCanary); i++ {
		assert.NotContains(t, cut.Body, egressCanary[i:i+16], "a run of the credential reached the agent: %+v", cut)
	}
	var again struct {
		Status int
		Guard  string
	}
	field(outA, "again", &again)
	assert.Equal(t, 403, again.Status, "after the partial reflection: %+v", again)
	assert.Equal(t, port.GuardReflection, again.Guard)
	var uncred struct{ Status int }
	field(outA, "uncredentialed", &uncred)
	assert.Equal(t, 200, uncred.Status)
	// 4. Every SSRF attempt of the flood is in the result, with its target.
	var flood struct {
		Counts   map[string]int
		Sent, Ms int
	}
	field(outA, "flood", &flood)
	t.Logf("flood: %d requests, answers %v, %d ms", flood.Sent, flood.Counts, flood.Ms)
	assert.Equal(t, 101, flood.Counts["403 ssrf"])
	ssrf := 0
	for _, r := range resA.Egress {
		if r.Guard == port.GuardSSRF {
			ssrf++
			assert.Equal(t, "169.254.169.254", r.Host)
			assert.True(t, strings.HasPrefix(r.Path, "/latest/meta-data/"), "path %q", r.Path)
		}
	}
	assert.Equal(t, 101, ssrf, "SSRF records kept in the result (summary %+v)", resA.EgressSummary)
	var reflected, encoding bool
	for _, r := range resA.Egress {
		reflected = reflected || r.Guard == port.GuardReflection && r.Path == "/echo-cut"
		encoding = encoding || r.Guard == port.GuardEncoding && r.Path == "/bomb"
	}
	assert.True(t, reflected, "the partial reflection is recorded")
	assert.True(t, encoding, "the bomb's refusal is recorded")
	// Run B: through the host's upstream proxy.
	resB, outB := run("b", &port.EgressPolicy{Providers: []port.EgressProvider{
		{ID: "mitm", URIs: []string{"https://r0.test:" + up.Port() + "/", "https://r1.test:" + up.Port() + "/", "https://r2.test:" + up.Port() + "/", "https://r3.test:" + up.Port() + "/", "https://r4.test:" + up.Port() + "/"}},
		{ID: "plain", URIs: []string{"http://p0.test:" + plain.Port() + "/", "http://p1.test:" + plain.Port() + "/", "http://p2.test:" + plain.Port() + "/", "http://p3.test:" + plain.Port() + "/", "http://p4.test:" + plain.Port() + "/"}},
		{ID: "tunnel", URIs: []string{"https://t0.test:" + up.Port(), "https://t1.test:" + up.Port(), "https://t2.test:" + up.Port(), "https://t3.test:" + up.Port(), "https://t4.test:" + up.Port()}, TunnelOnly: true},
	}, UpstreamProxy: fwd.URL,
		// A slow refill: the 400-request burst must meet the limit however long the
		// requests take (at the default 50 a second a loaded machine refilled most of it).
		Rate: port.EgressRate{RPS: 1, Burst: 60}})
	for _, c := range canaries {
		assert.Zero(t, c.Hits(), "connections reached the loopback canary through the upstream proxy")
	}
	var rebound []curlResult
	field(outB, "rebind", &rebound)
	for _, r := range rebound {
		assert.Equal(t, "200", r.Out, "%+v", r)
	}
	for _, s := range fwd.Seen() {
		assert.True(t, strings.HasPrefix(s, "CONNECT 127.0.0.1:"), "the upstream proxy was asked %q", s)
	}
	var rate map[string]int
	field(outB, "rate", &rate)
	t.Logf("rate: %v", rate)
	assert.Greater(t, rate["429 rate"], 100, "%v", rate)
	rateRecs := 0
	for _, r := range resB.Egress {
		if r.Guard == port.GuardRate {
			rateRecs++
		}
	}
	assert.Positive(t, rateRecs)

	// Run C: heads count against the byte cap (a run of its own, so that nothing
	// else spends the cap first).
	headBytes.Store(0)
	_, outC := run("c", &port.EgressPolicy{Providers: []port.EgressProvider{
		{ID: "docs", URIs: []string{"http://docs.test:" + plain.Port() + "/"}},
	}, MaxRunBytes: 32 << 20, Rate: port.EgressRate{RPS: 1e9, Burst: 1 << 30}})
	var heads map[string]int
	field(outC, "heads", &heads)
	t.Logf("heads: %v; %d bytes of heads and paths reached the upstream", heads, headBytes.Load())
	assert.Positive(t, heads["403 bytes"], "%v", heads)
	assert.LessOrEqual(t, headBytes.Load(), int64(32<<20))
}
