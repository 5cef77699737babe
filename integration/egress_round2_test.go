package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
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

//go:embed testdata/egress-round2.js
var egressRound2Agent []byte

func TestEgressHostileDocker(t *testing.T)     { testEgressHostile(t, dockerRunnerFor) }
func TestEgressHostileContainerd(t *testing.T) { testEgressHostile(t, containerdRunnerFor) }

// lowerPct spells s as lower-case %xx escapes.
func lowerPct(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02x", s[i])
	}
	return b.String()
}

// testEgressHostile is round 2 of the hostile egress run, in a real sandbox: an audit
// the agent cannot flood, parser refusals audited, credentials only where their
// placement allows, a reflection guard that decodes, and a forward request whose Host
// names another host refused. About 15 s per runtime.
func testEgressHostile(t *testing.T, runnerFor func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	nodeBin := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", nodeBin != "", "NODE24_BIN is not set (eval \"$(bash scripts/install-openclaw.sh)\")")
	testenv.NeedCommand(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := runnerFor(t, bin, func(ctx context.Context) (string, []byte, error) { return testimages.NodeArchive(ctx, nodeBin) })

	up := egresstest.NewUpstream(t, true, "api.test", "store.test")
	// The upstream reflects the credential it received in every spelling it can.
	up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.URL.Path {
		case "/v1/reflect":
			w.Header().Set("X-"+tok, "1")
			w.Header().Set("X-Lower", lowerPct(tok))
			esc, _ := json.Marshal(map[string]string{"t": tok})
			fmt.Fprintf(w, "lower=%s\njson=%s\njs=%s\nhtml=%s\n", lowerPct(tok), strings.ReplaceAll(string(esc), "_", `\u005f`),
				strings.ReplaceAll(tok, "_", `\x5f`), strings.ReplaceAll(tok, "e", "&#101;"))
		case "/v1/gzip":
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			io.WriteString(zw, "gz="+tok+"\n")
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(b.Bytes())
		case "/v1/br":
			w.Header().Set("Content-Encoding", "br")
			w.Write([]byte(tok))
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "header": r.Header})
		}
	})
	docs := egresstest.NewUpstream(t, false)
	res := egresstest.NewResolver()
	for _, n := range []string{"api.test", "store.test", "docs.test", "evil.test"} {
		res.Set(n, egresstest.Loopback)
	}
	llm := httptest.NewServer(http.NotFoundHandler())
	defer llm.Close()

	rig := newEgressRig(ctx, t, runner, "egress-it", res, up.PEM, llm.URL, egressRound2Agent)
	sb, logs := rig.sb, rig.logs
	ws := t.TempDir()
	require.NoError(t, os.Chmod(ws, 0o777))

	runID := testRunID("egress2")
	result, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv:         []string{testimages.NodeBinary, testimages.AppDir + "/agent.js"},
		Env:          map[string]string{"UPSTREAM_PORT": up.Port(), "PLAIN_PORT": docs.Port()},
		WorkspaceDir: ws,
		Mounts:       rig.mounts,
		Attribution:  port.Attribution{BillingAccountID: "acct-egress2"},
		Limits:       port.Limits{Timeout: 2 * time.Minute},
		Egress: &port.EgressPolicy{Providers: []port.EgressProvider{
			{ID: "github", URIs: []string{"https://api.test:" + up.Port() + "/v1/"}, Credentials: []string{"token"}},
			{ID: "store", URIs: []string{"https://store.test:" + up.Port() + "/v1/"}},
			{ID: "docs", URIs: []string{"http://docs.test:" + docs.Port() + "/"}},
		}, Rate: port.EgressRate{RPS: 1e9, Burst: 1 << 30}}, // the flood is the point here (the rate limit: round 3)
	})
	require.NoError(t, err)
	require.Equal(t, 0, result.Run.ExitCode, "stdout: %s\nstderr: %s", result.Run.Stdout, result.Run.Stderr)
	var out struct {
		Flood                                        struct{ Answered, Ms int }
		DupHost, Fullwidth, BraceInTunnel            string
		AfterFlood, SSRF                             curlResult
		PlacePath, PlaceQuery, PlaceHeader, ReadBack curlResult
		Reflect, Gzip, Br, HostMismatch              curlResult
		Mountinfo                                    string
	}
	require.NoError(t, json.Unmarshal(result.Run.Stdout, &out), "stdout: %s", result.Run.Stdout)
	t.Logf("flood: %d refusals answered in %d ms", out.Flood.Answered, out.Flood.Ms)

	// 1. The flood did not push out what followed it, and the result says what it summarised.
	require.Equal(t, 20000, out.Flood.Answered)
	require.NotNil(t, result.EgressSummary)
	sum := result.EgressSummary
	assert.Equal(t, rig.liveRecords(), sum.Records, "every record reached the live stream")
	assert.Equal(t, len(result.Egress), sum.Kept)
	total := 0
	for _, n := range sum.Summarised {
		total += n
	}
	assert.Equal(t, sum.Records, sum.Kept+total, "kept + summarised = written: %+v", sum)
	assert.Greater(t, sum.Summarised[port.GuardAllowlist], 14000, "%+v", sum)
	var afterFlood, ssrf, parsed, tunnels int
	for i, r := range result.Egress {
		switch {
		case r.Path == "/v1/after-flood":
			afterFlood++
			assert.Equal(t, []string{"token"}, r.Credentials)
			assert.Equal(t, 200, r.Status)
			for _, later := range result.Egress[i:] {
				if later.Guard == port.GuardSSRF {
					ssrf++
				}
			}
		case strings.Contains(r.Error, "parsed"):
			parsed++
		case strings.Contains(r.Error, "tunnel closed"):
			tunnels++
		}
	}
	assert.Equal(t, 1, afterFlood, "the credentialed request after the flood is in the result")
	assert.Positive(t, ssrf, "the SSRF attempt after the flood is in the result")
	// 2. Parser refusals: duplicate Host, fullwidth host, brace in a header name inside
	//    a tunnel, garbage in a plain tunnel; a tunnel that carried nothing.
	assert.Contains(t, out.DupHost, "400")
	assert.Contains(t, out.BraceInTunnel, "400")
	assert.GreaterOrEqual(t, parsed, 4, "parser refusals audited")
	assert.GreaterOrEqual(t, tunnels, 1, "an empty tunnel audited")

	// 3. Placements: a credential goes into Authorization only, by default.
	for name, r := range map[string]curlResult{"path": out.PlacePath, "query": out.PlaceQuery, "header": out.PlaceHeader} {
		assert.Contains(t, r.Out, `"guard":"placeholder"`, "%s: %+v", name, r)
	}
	for _, s := range up.Seen() {
		for k, vs := range s.Header {
			if k != "Authorization" {
				assert.NotContains(t, strings.Join(vs, " "), egressCanary, "the credential reached the upstream in %s", k)
			}
		}
		assert.NotContains(t, s.Path+s.RawQuery+s.Body, egressCanary, "the credential reached the upstream in %s", s.Path)
	}
	assert.NotContains(t, out.ReadBack.Out, egressCanary)

	// 4. The reflection guard.
	assert.NotContains(t, strings.ToLower(out.Reflect.Out), strings.ToLower("x-"+egressCanary), "a header named after the credential")
	assert.Contains(t, out.Reflect.Out, "lower={{token}}")
	assert.Contains(t, out.Reflect.Out, `json={"t":"{{token}}"}`)
	assert.Contains(t, out.Reflect.Out, "js={{token}}")
	assert.Contains(t, out.Reflect.Out, "html={{token}}")
	assert.Contains(t, out.Gzip.Out, "gz={{token}}")
	assert.Contains(t, out.Br.Out, `"guard":"encoding"`)
	for _, s := range []string{out.Reflect.Out, out.Gzip.Out, out.Br.Out} {
		assert.NotContains(t, s, egressCanary[:16])
		assert.NotContains(t, s, egressCanary[16:32])
		assert.NotContains(t, s, lowerPct(egressCanary)[:30])
	}

	// 5. Forward mode refuses a Host header naming another host, as tunnels do.
	assert.Contains(t, out.HostMismatch.Out, "421", "%+v", out.HostMismatch)
	assert.Contains(t, out.HostMismatch.Out, `"guard":"request"`)
	for _, s := range docs.Seen() {
		assert.NotEqual(t, "/page", s.Path, "the mismatched request reached the upstream")
	}

	// 6. The mount table names neither the host's socket base directory nor the
	//    run's directory (see docs/egress.md for what remains).
	t.Logf("mountinfo lines with the socket dir: %q", grepLines(out.Mountinfo, port.LLMSocketDir))

	audit, _ := json.Marshal(result)
	for what, s := range map[string]string{"stdout": string(result.Run.Stdout), "stderr": string(result.Run.Stderr), "result": string(audit), "logs": logs.String()} {
		assert.NotContains(t, s, egressCanary, "the canary is in the %s", what)
	}
}

func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
