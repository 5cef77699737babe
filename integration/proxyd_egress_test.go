package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox"
	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
)

func TestProxydEgressDocker(t *testing.T)     { testProxydEgress(t, dockerRunnerFor) }
func TestProxydEgressContainerd(t *testing.T) { testProxydEgress(t, containerdRunnerFor) }

// testProxydEgress is the egress acceptance run with the shared daemon serving
// the run's egress: the egress agent (Node's fetch, curl) reaches the
// allowlisted loopback HTTPS upstream with a placeholder the daemon resolves
// from the value the host gave at registration, everything else is refused, the
// audit comes back through the admin API, and the canary is nowhere the agent
// can look. The daemon runs in this process, since the test's resolver maps the
// test names to loopback; the sandbox reaches it only through its socket
// directory, as with the daemon's own process.
func testProxydEgress(t *testing.T, runnerFor func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
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
	for _, n := range []string{"api.test", "other.test", "evil.test", "docs.test"} {
		res.Set(n, egresstest.Loopback)
	}
	llm := httptest.NewServer(http.NotFoundHandler())
	defer llm.Close()

	logs := &testenv.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir, err := os.MkdirTemp("", "pxe")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	srv, err := proxydaemon.Open(ctx, proxydaemon.Config{StateDir: filepath.Join(dir, "state"), SocketDir: filepath.Join(dir, "runs"),
		Keys: runtoken.Keys{Current: []byte("proxyd-egress-it-secret-0123456789abcdef")}, Logger: logger,
		Egress: egress.Host{Resolver: res, Roots: up.Pool, RootsPEM: up.PEM, UnsafeAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	require.NoError(t, err)
	defer srv.Close()
	ln, err := proxydaemon.ListenAdmin(filepath.Join(dir, "admin.sock"))
	require.NoError(t, err)
	defer ln.Close()
	go srv.ServeAdmin(ln)
	client, err := api.NewClient(filepath.Join(dir, "admin.sock"))
	require.NoError(t, err)
	defer client.Close()
	proxies, err := api.NewManager(client, api.WithSandboxUID(1001), api.WithLogger(logger))
	require.NoError(t, err)

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

	runID := testRunID("pxd-egress")
	result, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: runID, Image: image,
		Argv:         []string{testimages.NodeBinary, testimages.AppDir + "/agent.js"},
		Env:          map[string]string{"UPSTREAM_PORT": up.Port(), "PLAIN_PORT": docs.Port(), "HTTPS_PROXY": "http://caller-tried.example:1", "NO_PROXY": "*"},
		WorkspaceDir: ws,
		Mounts:       []port.Mount{{Source: app, Target: testimages.AppDir}, {Source: curlDir, Target: testimages.CurlMountDir}},
		Attribution:  port.Attribution{BillingAccountID: "acct-pxd-egress"},
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
		Fetch, FetchDenied struct {
			Status      int
			Body, Error string
		}
		Curl, CurlDenied, CurlDeniedTLS curlResult
		NoProxy, DirectIP               curlResult
	}
	require.NoError(t, json.Unmarshal(result.Run.Stdout, &out), "stdout: %s", result.Run.Stdout)

	// The upstream received the real token from both tools; the agent saw only the placeholder.
	paths := map[string]string{}
	for _, s := range up.Seen() {
		paths[s.Path] = s.Header.Get("Authorization")
	}
	assert.Equal(t, "Bearer "+egressCanary, paths["/v1/fetch"], "fetch: %+v", out.Fetch)
	assert.Equal(t, "Bearer "+egressCanary, paths["/v1/curl"], "curl: %+v", out.Curl)
	assert.Equal(t, 200, out.Fetch.Status, "fetch: %+v", out.Fetch)
	assert.Contains(t, out.Fetch.Body, `"Bearer {{token}}"`)
	assert.Contains(t, out.Curl.Out, `"Bearer {{token}}"`)
	assert.NotContains(t, paths, "/v1/direct", "a request bypassed the proxy")
	assert.Len(t, up.Seen(), 4, "only the four allowed requests reached the upstream: %+v", paths)

	// Refusals: a host off the allowlist, by forward request and by CONNECT; no way around the proxy.
	assert.Equal(t, 0, out.FetchDenied.Status, "%+v", out.FetchDenied)
	assert.NotEmpty(t, out.FetchDenied.Error)
	assert.Contains(t, out.CurlDenied.Out, `"type":"egress_denied"`)
	assert.Contains(t, out.CurlDenied.Out, `"guard":"allowlist"`)
	assert.Contains(t, out.CurlDeniedTLS.Err, "403")
	for _, r := range []curlResult{out.NoProxy, out.DirectIP} {
		assert.NotEqual(t, 0, r.Code, "%+v", r)
	}

	// The audit came back through the admin API, whole, and reached the host's callback.
	require.NotEmpty(t, result.Egress)
	if assert.NotNil(t, result.EgressSummary) {
		assert.Equal(t, len(result.Egress), result.EgressSummary.Records)
		assert.Equal(t, len(result.Egress), result.EgressSummary.Kept)
	}
	var mitm, refused int
	for _, r := range result.Egress {
		assert.Equal(t, runID, r.RunID)
		if r.Mode == "mitm" && r.Status == 200 {
			mitm++
			assert.Equal(t, "github", r.Provider)
		}
		if r.Guard == port.GuardAllowlist {
			refused++
		}
	}
	assert.Equal(t, 3, mitm)
	assert.Positive(t, refused)
	mu.Lock()
	assert.Equal(t, len(result.Egress), len(live))
	assert.ElementsMatch(t, []string{runID + "/github/token", runID + "/docs/token"}, fetched, "each credential resolved once, at registration")
	mu.Unlock()
	runs, err := client.List(ctx)
	require.NoError(t, err)
	for _, r := range runs {
		assert.NotEqual(t, runID, r.RunID, "the run is still registered")
	}

	// The canary scan: what the agent saw, the daemon's state and the logs.
	dump, err := os.ReadFile(filepath.Join(ws, "dump.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(dump), "== /proc/1/environ", "the dump covers /proc")
	assert.Contains(t, string(dump), "BEGIN CERTIFICATE", "the dump covers the CA bundle")
	audit, _ := json.Marshal(result)
	for what, s := range map[string]string{"dump": string(dump), "stdout": string(result.Run.Stdout), "stderr": string(result.Run.Stderr),
		"result": string(audit), "logs": logs.String()} {
		assert.NotContains(t, s, egressCanary, "the canary is in the %s", what)
		assert.NotContains(t, s, "PRIVATE KEY", "a private key is in the %s", what)
	}
	_ = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(path)
			assert.False(t, strings.Contains(string(b), egressCanary), "the daemon's %s holds the canary", path)
		}
		return nil
	})
}
