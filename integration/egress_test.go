package integration

import (
	"context"
	_ "embed"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
)

//go:embed testdata/egress-agent.js
var egressAgent []byte

// egressCanary is the credential the host holds; it must never be visible to the agent.
const egressCanary = "ghp_egressCanary0a1b2c3d4e5f60718293a4b5c6d7e8f9"

func TestEgressDocker(t *testing.T)     { testEgress(t, dockerRunnerFor) }
func TestEgressContainerd(t *testing.T) { testEgress(t, containerdRunnerFor) }

// testEgress is the acceptance run in a real sandbox: Node's fetch and curl
// reach an allowlisted HTTPS upstream through HTTPS_PROXY with a placeholder the
// proxy resolves; everything else is refused; the canary is nowhere the agent sees.
func testEgress(t *testing.T, runnerFor func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	nodeBin := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", nodeBin != "", "NODE24_BIN is not set (eval \"$(bash scripts/install-openclaw.sh)\")")
	testenv.NeedCommand(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := runnerFor(t, bin, func(ctx context.Context) (string, []byte, error) { return testimages.NodeArchive(ctx, nodeBin) })

	up := egresstest.NewUpstream(t, true, "api.test", "other.test")
	docs := egresstest.NewUpstream(t, false)
	res := egresstest.NewResolver()
	res.Set("api.test", egresstest.Loopback)
	res.Set("other.test", egresstest.Loopback)
	res.Set("evil.test", egresstest.Loopback)
	res.Set("docs.test", egresstest.Loopback)
	llm := httptest.NewServer(http.NotFoundHandler())
	defer llm.Close()

	logs := &testenv.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base, err := os.MkdirTemp("", "egress")
	require.NoError(t, err)
	defer os.RemoveAll(base)
	proxies, err := inprocproxy.NewManager(inprocproxy.WithBaseDir(base), inprocproxy.WithOwner(testenv.Owner("egress-it")), inprocproxy.WithSandboxUID(1001), inprocproxy.WithLogger(logger),
		inprocproxy.WithEgressResolver(res), inprocproxy.WithEgressUpstreamRoots(up.PEM),
		inprocproxy.WithEgressUnsafeAllow(netip.MustParsePrefix("127.0.0.1/32")))
	require.NoError(t, err)
	defer proxies.Shutdown(context.Background())

	var (
		mu      sync.Mutex
		live    []port.EgressRecord
		fetched []string
	)
	creds := port.CredentialFunc(func(_ context.Context, runID, provider, name string) (string, error) {
		mu.Lock()
		fetched = append(fetched, runID+"/"+provider+"/"+name)
		mu.Unlock()
		return egressCanary, nil
	})
	sb, err := sandbox.New(runner, sandbox.WithLogger(logger),
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: llm.URL, APIKey: testKey}),
		sandbox.WithEgress(creds, func(r port.EgressRecord) { mu.Lock(); live = append(live, r); mu.Unlock() }))
	require.NoError(t, err)

	app := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(app, "agent.js"), egressAgent, 0o644))
	curlDir := t.TempDir()
	require.NoError(t, testimages.CurlDir(ctx, curlDir))
	require.NoError(t, os.Chmod(app, 0o755))
	require.NoError(t, os.Chmod(curlDir, 0o755))
	ws := t.TempDir()
	require.NoError(t, os.Chmod(ws, 0o777))

	runID := testRunID("egress")
	result, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv:         []string{testimages.NodeBinary, testimages.AppDir + "/agent.js"},
		Env:          map[string]string{"UPSTREAM_PORT": up.Port(), "PLAIN_PORT": docs.Port(), "HTTPS_PROXY": "http://caller-tried.example:1", "NO_PROXY": "*"},
		WorkspaceDir: ws,
		Mounts:       []port.Mount{{Source: app, Target: testimages.AppDir}, {Source: curlDir, Target: testimages.CurlMountDir}},
		Attribution:  port.Attribution{BillingAccountID: "acct-egress"},
		Limits:       port.Limits{Timeout: 2 * time.Minute},
		Egress: &port.EgressPolicy{Providers: []port.EgressProvider{
			{ID: "github", URIs: []string{"https://api.test:" + up.Port() + "/v1/"}, Credentials: []string{"token"},
				Placements: map[string]port.CredentialPlacement{"token": {Body: true}}},
			{ID: "docs", URIs: []string{"http://docs.test:" + docs.Port() + "/"}, Credentials: []string{"token"},
				Placements: map[string]port.CredentialPlacement{"token": {Headers: []string{"X-Key"}}}},
		}},
	})
	require.NoError(t, err)
	require.Equal(t, 0, result.Run.ExitCode, "stdout: %s\nstderr: %s", result.Run.Stdout, result.Run.Stderr)

	var out struct {
		Endpoint struct {
			Status                 int
			Truncated, Body, Error string
		}
		Fetch, FetchDenied, FetchPlain struct {
			Status      int
			Body, Error string
		}
		Curl, CurlDenied, CurlDeniedTLS curlResult
		IPLiterals                      []curlResult
		IPLiteralTunnel                 curlResult
		OtherPort, NoProxy, NoProxyEnv  curlResult
		DirectIP                        curlResult
		RelayAllowed, RelayDenied       curlResult
		Fronting                        curlResult
	}
	require.NoError(t, json.Unmarshal(result.Run.Stdout, &out), "stdout: %s", result.Run.Stdout)

	// The upstream received the real token from both tools; the agent saw only the
	// placeholder, also where the upstream echoed it back.
	seen := up.Seen()
	paths := map[string]string{}
	for _, s := range seen {
		paths[s.Path] = s.Header.Get("Authorization")
	}
	assert.Equal(t, "Bearer "+egressCanary, paths["/v1/fetch"], "fetch: %+v", out.Fetch)
	assert.Equal(t, "Bearer "+egressCanary, paths["/v1/curl"], "curl: %+v", out.Curl)
	assert.Equal(t, "Bearer "+egressCanary, paths["/v1/relay"], "relay: %+v", out.RelayAllowed)
	var endpointBody string
	for _, s := range seen {
		if s.Path == "/v1/endpoint" {
			endpointBody = s.Body
		}
	}
	assert.Equal(t, `{"auth":"`+egressCanary+`"}`, endpointBody, "endpoint: %+v", out.Endpoint)
	assert.Equal(t, 200, out.Endpoint.Status, "%+v", out.Endpoint)
	assert.Contains(t, out.Endpoint.Body, "{{token}}")
	assert.Equal(t, 200, out.Fetch.Status, "fetch: %+v", out.Fetch)
	assert.Equal(t, 200, out.FetchPlain.Status, "fetch, plain http: %+v", out.FetchPlain)
	if ds := docs.Seen(); assert.Len(t, ds, 1) {
		assert.Equal(t, egressCanary, ds[0].Header.Get("X-Key"))
		assert.Equal(t, "/page", ds[0].Path)
	}
	assert.Contains(t, out.FetchPlain.Body, `"X-Key":["{{token}}"]`)
	assert.Contains(t, out.Fetch.Body, `"Bearer {{token}}"`)
	assert.Contains(t, out.Curl.Out, `"Bearer {{token}}"`)
	assert.NotContains(t, paths, "/v1/direct", "a request bypassed the proxy")
	assert.NotContains(t, paths, "/v1/front", "a fronted request reached the upstream")
	assert.Len(t, seen, 4, "only the four allowed requests reached the upstream: %+v", paths)

	// Denials: JSON naming the guard, for forward requests; failed tunnels for CONNECT.
	// Node's fetch tunnels plain http through CONNECT as well: the refusal is a
	// failed request.
	assert.Equal(t, 0, out.FetchDenied.Status, "%+v", out.FetchDenied)
	assert.NotEmpty(t, out.FetchDenied.Error)
	assert.Contains(t, out.CurlDenied.Out, `"type":"egress_denied"`)
	assert.NotEqual(t, 0, out.CurlDeniedTLS.Code)
	assert.Contains(t, out.CurlDeniedTLS.Err, "403")
	require.Len(t, out.IPLiterals, 7)
	for i, r := range out.IPLiterals {
		assert.Contains(t, r.Out, `"guard":"ssrf"`, "ip literal %d: %+v", i, r)
	}
	assert.Contains(t, out.IPLiteralTunnel.Err, "403")
	assert.Contains(t, out.OtherPort.Out, `"guard":"port"`)
	for _, r := range []curlResult{out.NoProxy, out.NoProxyEnv, out.DirectIP} {
		assert.NotEqual(t, 0, r.Code, "%+v", r)
	}
	assert.NotEqual(t, 0, out.RelayDenied.Code)
	assert.Contains(t, out.Fronting.Out, `"guard":"request"`)

	// The audit: every request recorded, live and in the result, without the canary.
	require.NotEmpty(t, result.Egress)
	mu.Lock()
	assert.Equal(t, len(result.Egress), len(live))
	mu.Unlock()
	var mitm, endpoint int
	for _, r := range result.Egress {
		if r.Mode == "proxy" && r.Status == 200 {
			endpoint++
		}
		assert.Equal(t, runID, r.RunID)
		if r.Mode == "mitm" && r.Status == 200 {
			mitm++
			assert.Equal(t, "github", r.Provider)
			assert.Positive(t, r.Reflected, "the echo was redacted: %+v", r)
		}
	}
	assert.Equal(t, 3, mitm)
	assert.Equal(t, 1, endpoint)
	mu.Lock()
	for _, f := range fetched {
		assert.Contains(t, []string{runID + "/github/token", runID + "/docs/token"}, f, "a credential fetched for the run and provider it serves")
	}
	mu.Unlock()

	// The canary scan: env, /proc, files, outputs, audit, logs.
	dump, err := os.ReadFile(filepath.Join(ws, "dump.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(dump), "== /proc/1/environ", "the dump covers /proc")
	assert.Contains(t, string(dump), "BEGIN CERTIFICATE", "the dump covers the CA bundle")
	assert.Contains(t, string(dump), "NODE_USE_ENV_PROXY", "the dump covers the environment")
	assert.NotContains(t, string(dump), "caller-tried", "the runner's proxy variables win")
	audit, _ := json.Marshal(result)
	for what, s := range map[string]string{"dump": string(dump), "stdout": string(result.Run.Stdout), "stderr": string(result.Run.Stderr),
		"result": string(audit), "logs": logs.String()} {
		assert.NotContains(t, s, egressCanary, "the canary is in the %s", what)
		assert.NotContains(t, s, "PRIVATE KEY", "a private key is in the %s", what)
	}
}

type curlResult struct {
	Code     int
	Out, Err string
}
