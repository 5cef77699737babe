package nginxconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func typicalSpec() port.ProxySpec {
	return port.ProxySpec{
		RunID: "run-42", Attempt: 1, Upstream: "http://litellm:4000", APIKey: "sk-master-0123456789",
		Attribution: port.Attribution{
			BillingAccountID: "acct-7", UserID: "user-3", GraphID: "sandbox:agent",
			ExistingTraceID: "trace-9", SessionID: "sess-5", TraceUserID: "user-3",
		},
	}
}

func mustPolicy(t testing.TB, spec port.ProxySpec) *proxypolicy.Policy {
	t.Helper()
	p, err := proxypolicy.NewPolicy(spec)
	require.NoError(t, err)
	return p
}

func TestRenderNginxGolden(t *testing.T) {
	cases := map[string]NginxConfig{
		"typical.conf": {Policy: mustPolicy(t, typicalSpec()), Upstream: "http://litellm:4000"},
		"https.conf": {
			Policy: mustPolicy(t, typicalSpec()), Upstream: "https://llm.internal.example:8443",
			UpstreamCAFile: "/etc/llmproxy/ca.pem", SocketPath: "/run-sock/s.sock", AuditLogPath: "/audit/a.log",
			RuntimeDir: "/tmp/nginx", ReadTimeout: 90 * time.Second, ConnectTimeout: 1500 * time.Millisecond, MaxBodyBytes: 1 << 20,
		},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := RenderNginx(cfg)
			require.NoError(t, err)
			file := filepath.Join("testdata", name)
			if *update {
				require.NoError(t, os.WriteFile(file, got, 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test -update to create the golden file")
			assert.Equal(t, string(want), string(got), "rendered config differs from %s (go test -update rewrites it)", file)
		})
	}
}

// TestRenderNginxContent checks the typical config's directives one by one, through the
// tokenizer, so a golden file rewritten carelessly cannot hide a lost property.
func TestRenderNginxContent(t *testing.T) {
	conf, err := RenderNginx(NginxConfig{Policy: mustPolicy(t, typicalSpec()), Upstream: "http://litellm:4000"})
	require.NoError(t, err)
	ds, err := parseNginx(string(conf))
	require.NoError(t, err)

	one := func(name string, args ...string) {
		t.Helper()
		got := find(ds, name, args[0])
		require.Len(t, got, 1, name)
		assert.Equal(t, args, got[0].Args, name)
	}
	one("listen", "unix:"+DefaultSocketPath)
	one("pid", "/tmp/nginx.pid")
	one("error_log", "stderr", "warn")
	var logs [][]string
	for _, d := range find(ds, "access_log", DefaultAuditLogPath) {
		logs = append(logs, d.Args)
	}
	assert.Equal(t, [][]string{
		{DefaultAuditLogPath, "llmproxy_audit", "if=$llmproxy_log_full"},
		{DefaultAuditLogPath, "llmproxy_tally", "if=$llmproxy_log_tally"},
	}, logs, "full lines and tally lines, each under its condition")
	one("client_body_temp_path", "/tmp/nginx-client-body")
	one("proxy_temp_path", "/tmp/nginx-proxy")
	one("proxy_pass_request_headers", "off")
	one("proxy_http_version", "1.1")
	one("proxy_buffering", "off")
	one("proxy_request_buffering", "off")
	one("proxy_cache", "off")
	one("proxy_next_upstream", "off")
	one("gzip", "off")
	one("proxy_read_timeout", "3600s")
	one("proxy_connect_timeout", "10s")
	one("client_max_body_size", "67108864")
	one("server", "litellm:4000")
	assert.Len(t, find(ds, "access_log", "off"), 2, "for /health and the attestation path only")
	assert.Len(t, find(ds, "access_log", ""), 4)
	assert.Empty(t, find(ds, "daemon", ""), "daemon off is given on the command line (NginxArgs)")
	assert.Empty(t, find(ds, "proxy_ssl_verify", ""))

	set := map[string]string{}
	for _, d := range find(ds, "proxy_set_header", "") {
		require.Len(t, d.Args, 2)
		set[d.Args[0]] = d.Args[1]
	}
	assert.Equal(t, map[string]string{
		"Host":                          "litellm:4000",
		"Connection":                    "",
		"Content-Type":                  "$llmproxy_content_type",
		"Accept":                        "$http_accept",
		"User-Agent":                    "$http_user_agent",
		"OpenAI-Beta":                   "$http_openai_beta",
		"Anthropic-Version":             "$http_anthropic_version",
		"Anthropic-Beta":                "$http_anthropic_beta",
		"Authorization":                 "Bearer sk-master-0123456789",
		"X-Litellm-End-User-Id":         "acct-7",
		"X-Litellm-Spend-Logs-Metadata": `{"run_id":"run-42","attempt":1,"user_id":"user-3","graph_id":"sandbox:agent","existing_trace_id":"trace-9","session_id":"sess-5","trace_user_id":"user-3"}`,
	}, set)
	var passed []string
	for _, d := range find(ds, "proxy_pass_header", "") {
		passed = append(passed, d.Args...)
	}
	assert.Equal(t, []string{"X-Litellm-Call-Id", "X-Litellm-Response-Cost", "X-Litellm-Model-Id"}, passed)

	// Only the route allowlist reaches the upstream (each route also bare, and the
	// model sub-paths); everything else is a 404.
	var proxied, wantProxied []string
	for _, loc := range find(ds, "location", "") {
		if len(find(loc.Block, "proxy_pass", "")) > 0 {
			proxied = append(proxied, strings.Join(loc.Args, " "))
		}
	}
	for _, r := range proxypolicy.Routes() {
		wantProxied = append(wantProxied, "= "+r.Path, "= "+strings.TrimPrefix(r.Path, "/v1"))
		if r.SubPaths {
			wantProxied = append(wantProxied, "^~ "+r.Path+"/")
		}
	}
	assert.Equal(t, wantProxied, proxied)
	for _, p := range []string{"/", "/v1/"} {
		catchAll := find(ds, "location", p)
		require.Len(t, catchAll, 1, p)
		ret := find(catchAll[0].Block, "return", "")
		require.Len(t, ret, 1)
		assert.Equal(t, "404", ret[0].Args[0])
	}
	var exact []string
	for _, loc := range find(ds, "location", "=") {
		if len(find(loc.Block, "proxy_pass", "")) > 0 {
			continue
		}
		exact = append(exact, loc.Args[1])
		ret := find(loc.Block, "return", "")
		require.Len(t, ret, 1)
		if loc.Args[1] == "/v1" {
			assert.Equal(t, "404", ret[0].Args[0], "/v1 is not redirected to /v1/")
		}
	}
	assert.Equal(t, []string{"/_agentsandbox/attestation", "/health", "/v1"}, exact)

	// The log format never names a request header or a body.
	var format strings.Builder
	for _, d := range find(ds, "log_format", "llmproxy_audit") {
		for _, a := range d.Args[2:] {
			format.WriteString(a)
		}
	}
	for _, banned := range []string{"$http_", "$request_body", "$args", "$request_uri", "$query_string", "authorization"} {
		assert.NotContains(t, strings.ToLower(format.String()), strings.ToLower(banned))
	}
	assert.Contains(t, format.String(), `"run_id":"run-42","attempt":"1"`)
}

func TestRenderNginxUpstreams(t *testing.T) {
	pol := mustPolicy(t, typicalSpec())
	cases := []struct{ upstream, server, host string }{
		{"http://127.0.0.1:4000", "127.0.0.1:4000", "127.0.0.1:4000"},
		{"http://127.0.0.1:4000/", "127.0.0.1:4000", "127.0.0.1:4000"},
		{"http://litellm", "litellm:80", "litellm"},
		{"http://[::1]:4000", "[::1]:4000", "[::1]:4000"},
		{"http://litellm_proxy_1.svc.cluster.local.:4000", "litellm_proxy_1.svc.cluster.local.:4000", "litellm_proxy_1.svc.cluster.local.:4000"},
	}
	for _, c := range cases {
		t.Run(c.upstream, func(t *testing.T) {
			conf, err := RenderNginx(NginxConfig{Policy: pol, Upstream: c.upstream})
			require.NoError(t, err)
			ds, err := parseNginx(string(conf))
			require.NoError(t, err)
			srv := find(ds, "server", c.server)
			require.Len(t, srv, 1, "upstream server")
			host := find(ds, "proxy_set_header", "Host")
			require.Len(t, host, 1)
			assert.Equal(t, c.host, host[0].Args[1])
		})
	}
}

func TestRenderNginxRejects(t *testing.T) {
	pol := mustPolicy(t, typicalSpec())
	ok := func() NginxConfig { return NginxConfig{Policy: pol, Upstream: "http://127.0.0.1:4000"} }
	cases := map[string]func(*NginxConfig){
		"no policy":              func(c *NginxConfig) { c.Policy = nil },
		"zero policy":            func(c *NginxConfig) { c.Policy = &proxypolicy.Policy{} },
		"no upstream":            func(c *NginxConfig) { c.Upstream = "" },
		"upstream path":          func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:4000/v1" },
		"upstream query":         func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:4000?x=1" },
		"upstream empty query":   func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:4000/?" },
		"upstream fragment":      func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:4000#x" },
		"upstream userinfo":      func(c *NginxConfig) { c.Upstream = "http://user:pw@127.0.0.1:4000" },
		"upstream scheme":        func(c *NginxConfig) { c.Upstream = "ftp://127.0.0.1:4000" },
		"upstream no scheme":     func(c *NginxConfig) { c.Upstream = "127.0.0.1:4000" },
		"upstream port text":     func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:http" },
		"upstream port range":    func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:65536" },
		"upstream port zero":     func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:0" },
		"upstream empty port":    func(c *NginxConfig) { c.Upstream = "http://127.0.0.1:" },
		"upstream dollar host":   func(c *NginxConfig) { c.Upstream = "http://$host:4000" },
		"upstream semicolon":     func(c *NginxConfig) { c.Upstream = "http://a;b:4000" },
		"upstream brace":         func(c *NginxConfig) { c.Upstream = "http://a}:4000" },
		"upstream space":         func(c *NginxConfig) { c.Upstream = "http://a b:4000" },
		"upstream newline":       func(c *NginxConfig) { c.Upstream = "http://a\n:4000" },
		"upstream ipv6 zone":     func(c *NginxConfig) { c.Upstream = "http://[fe80::1%25eth0]:4000" },
		"upstream bad label":     func(c *NginxConfig) { c.Upstream = "http://-a.b:4000" },
		"https without CA":       func(c *NginxConfig) { c.Upstream = "https://llm:443" },
		"CA without https":       func(c *NginxConfig) { c.UpstreamCAFile = "/ca.pem" },
		"relative socket":        func(c *NginxConfig) { c.SocketPath = "llm.sock" },
		"socket with dollar":     func(c *NginxConfig) { c.SocketPath = "/llm-sock/$host.sock" },
		"socket with quote":      func(c *NginxConfig) { c.SocketPath = `/llm-sock/a".sock` },
		"socket with semicolon":  func(c *NginxConfig) { c.SocketPath = "/llm-sock/a;b" },
		"audit with dot-dot":     func(c *NginxConfig) { c.AuditLogPath = "/var/log/../etc/passwd" },
		"audit with space":       func(c *NginxConfig) { c.AuditLogPath = "/var/log/a b" },
		"runtime dir root":       func(c *NginxConfig) { c.RuntimeDir = "/" },
		"runtime dir trailing /": func(c *NginxConfig) { c.RuntimeDir = "/tmp/" },
		"negative body":          func(c *NginxConfig) { c.MaxBodyBytes = -1 },
		"tiny timeout":           func(c *NginxConfig) { c.ReadTimeout = time.Microsecond },
		"huge timeout":           func(c *NginxConfig) { c.ConnectTimeout = 30 * 24 * time.Hour },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			c := ok()
			mut(&c)
			conf, err := RenderNginx(c)
			require.ErrorIs(t, err, port.ErrInvalidSpec)
			assert.Nil(t, conf)
		})
	}
	_, err := RenderNginx(ok())
	require.NoError(t, err, "the base case must render")
}

func TestQuoteValue(t *testing.T) {
	for _, v := range []string{
		"", "plain", `a"b`, `a\b`, `\"`, `\\"`, "$", "$$", "${x}", "$host", `\$host`, "; } { #", "'", `\n`,
		"line\nbreak", "tab\there", "cr\r", "${llmproxy_dollar}",
	} {
		q, err := quoteValue(v)
		require.NoError(t, err, "%q", v)
		ds, err := parseNginx("x " + q + ";")
		require.NoError(t, err, "%q -> %s", v, q)
		require.Len(t, ds, 1)
		require.Len(t, ds[0].Args, 1)
		assert.Equal(t, v, undollar(t, ds[0].Args[0]), "%q -> %s", v, q)
	}
	_, err := quoteValue("nul\x00")
	assert.Error(t, err)
	_, err = quoteValue(strings.Repeat("$", 300))
	assert.ErrorContains(t, err, "over its limit")
}

func TestForwardedRequestHeaders(t *testing.T) {
	names := ForwardedRequestHeaders()
	assert.Equal(t, []string{"Content-Type", "Accept", "User-Agent", "OpenAI-Beta", "Anthropic-Version", "Anthropic-Beta"}, names)
	for _, n := range names {
		assert.False(t, proxypolicy.IsStripped(n), n)
	}
	names[0] = "Authorization"
	assert.Equal(t, "Content-Type", ForwardedRequestHeaders()[0], "callers get a copy")
}

func TestNginxArgs(t *testing.T) {
	assert.Equal(t, []string{"-e", "stderr", "-c", "/etc/llmproxy/nginx.conf", "-g", "daemon off;"}, NginxArgs("/etc/llmproxy/nginx.conf"))
}

// TestRenderNginxPassesNginxT runs nginx -t on the typical config and on an https one
// with a real CA file.
func TestRenderNginxPassesNginxT(t *testing.T) {
	nginx := testenv.NeedCommand(t, "nginx", "nginx")
	t.Run("typical", func(t *testing.T) {
		spec := typicalSpec()
		spec.Upstream = "http://127.0.0.1:4000" // nginx -t resolves names
		nginxTest(t, nginx, spec)
	})
	t.Run("https", func(t *testing.T) {
		dir := t.TempDir()
		ca := filepath.Join(dir, "ca.pem")
		writeTestCA(t, ca)
		conf, err := RenderNginx(NginxConfig{
			Policy: mustPolicy(t, typicalSpec()), Upstream: "https://localhost:8443", UpstreamCAFile: ca,
			SocketPath: filepath.Join(dir, "s.sock"), AuditLogPath: filepath.Join(dir, "audit.log"), RuntimeDir: dir,
			ScriptPath: filepath.Join(dir, "llmproxy.js"),
		})
		require.NoError(t, err)
		ds, err := parseNginx(string(conf))
		require.NoError(t, err)
		require.Len(t, find(ds, "proxy_ssl_verify", "on"), 1)
		require.Len(t, find(ds, "proxy_ssl_trusted_certificate", ca), 1)
		require.NotEmpty(t, find(ds, "proxy_pass", "https://llmproxy_upstream"))
		runNginxT(t, nginx, dir, conf)
	})
}

func writeTestCA(t *testing.T, file string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
}
