package openclaw_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

var update = flag.Bool("update", false, "rewrite golden files and CLI fixtures in testdata")

func testModels(t testing.TB) []openclaw.Model {
	t.Helper()
	flash, err := openclaw.NewModel("gemini-2.5-flash", "Gemini 2.5 Flash", 1048576, 65536)
	require.NoError(t, err)
	return []openclaw.Model{
		flash,
		{ID: "openrouter/anthropic/claude-sonnet-4.5", Name: "Claude Sonnet 4.5 <via OpenRouter & co>", ContextWindow: 200000, MaxTokens: 64000, Reasoning: true, Images: true},
	}
}

// catalogModels is a catalog as litellm.Client.Models returns it: one model with
// every field, one LiteLLM knows nothing about.
func catalogModels(t testing.TB) []openclaw.Model {
	t.Helper()
	m, err := openclaw.ModelsFromLiteLLM([]litellm.ModelInfo{
		{ID: "gpt-4o-mini", DisplayName: "GPT-4o mini", OwnedBy: "openai", Provider: "openai", ContextWindow: 128000, MaxOutputTokens: 16384, InputCostPerToken: 0.15e-6, OutputCostPerToken: 0.6e-6, SupportsVision: true},
		{ID: "team/custom-model", DisplayName: "team/custom-model", OwnedBy: "openai"},
	})
	require.NoError(t, err)
	return m
}

// configCases are the configs checked against golden files and the real CLI.
func configCases(t testing.TB) map[string][]openclaw.Option {
	m := testModels(t)
	return map[string][]openclaw.Option{
		"sandbox":         {openclaw.WithModels(m...)},
		"litellm-catalog": {openclaw.WithModels(catalogModels(t)...)},
		"gateway-token": {
			openclaw.WithModels(m...),
			openclaw.WithDefaultModel("openrouter/anthropic/claude-sonnet-4.5"),
			openclaw.WithBaseURL("http://llm-proxy:8080/v1/"),
			openclaw.WithGateway(openclaw.Gateway{Port: 18789, Bind: "lan", Token: "tok-0123456789abcdef"}),
			openclaw.WithAgentTimeout(1500 * time.Millisecond),
		},
		"gateway-tokenenv-extras": {
			openclaw.WithModels(m[0]),
			openclaw.WithProviderName("proxy"),
			openclaw.WithAgentID("coder"),
			openclaw.WithWorkspace("/srv/agent/"),
			openclaw.WithGateway(openclaw.Gateway{Port: 19001, TokenEnv: "SANDBOX_GATEWAY_TOKEN"}),
			openclaw.WithDeny("group:media", "canvas", "browser"),
			openclaw.WithPlugins("memory-core", "a2a", "memory-core"),
			openclaw.WithSetting("agents.defaults.thinkingDefault", "low"),
			openclaw.WithSetting("agents.entries.coder.name", "Coder"),
			openclaw.WithSetting("cron.enabled", false), // same value as generated: allowed
			openclaw.WithSetting("tools.deny", []string{"browser", "canvas", "cron", "gateway", "group:media", "message", "nodes", "sessions_send", "sessions_spawn", "exec"}),
		},
	}
}

func TestConfigGolden(t *testing.T) {
	for name, opts := range configCases(t) {
		t.Run(name, func(t *testing.T) {
			cfg, err := openclaw.NewConfig(opts...)
			require.NoError(t, err)
			got := cfg.JSON()
			golden := filepath.Join("testdata", "config", name+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -update to create the golden file")
			assert.Equal(t, string(want), string(got))

			// Deterministic: the same options give the same bytes, every time.
			again, err := openclaw.NewConfig(opts...)
			require.NoError(t, err)
			assert.Equal(t, got, again.JSON())
			compact, err := again.MarshalJSON()
			require.NoError(t, err)
			var a, b any
			require.NoError(t, json.Unmarshal(compact, &a))
			require.NoError(t, json.Unmarshal(got, &b))
			assert.Equal(t, b, a, "compact and indented forms hold the same data")
		})
	}
}

func TestConfigInvariantsHeld(t *testing.T) {
	for name, opts := range configCases(t) {
		t.Run(name, func(t *testing.T) {
			cfg, err := openclaw.NewConfig(opts...)
			require.NoError(t, err)
			get := func(p string) any {
				v, ok := cfg.Lookup(p)
				require.True(t, ok, "missing %s", p)
				return v
			}
			assert.Equal(t, "off", get("agents.defaults.sandbox.mode"))
			assert.Equal(t, false, get("cron.enabled"))
			assert.Equal(t, false, get("tools.elevated.enabled"))
			assert.Equal(t, "off", get("agents.defaults.elevatedDefault"))
			assert.Equal(t, "0m", get("agents.defaults.heartbeat.every"))
			assert.Equal(t, "replace", get("models.mode"))
			assert.Len(t, get("models.providers"), 1)
			assert.Equal(t, false, get("models.catalogRefresh.enabled"))
			assert.Equal(t, false, get("update.checkOnStart"))
			assert.Equal(t, false, get("gateway.controlUi.enabled"))
			_, legacy := cfg.Lookup("agents.list")
			assert.False(t, legacy, "agents.list is legacy")
			deny := get("tools.deny").([]any)
			for _, tool := range openclaw.RequiredDeny(cfg.Gateway()) {
				assert.Contains(t, deny, tool)
			}
			if cfg.Gateway() {
				assert.Equal(t, "token", get("gateway.auth.mode"))
			} else {
				_, hasAuth := cfg.Lookup("gateway.auth")
				assert.False(t, hasAuth, "a sandbox config has no gateway listener settings")
				assert.Contains(t, deny, "group:web", "no web tools without a network")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...))
	require.NoError(t, err)
	assert.Equal(t, "http://"+port.BridgeAddr+"/v1", openclaw.DefaultBaseURL)
	url, _ := cfg.Lookup("models.providers.litellm.baseUrl")
	assert.Equal(t, openclaw.DefaultBaseURL, url)
	assert.Equal(t, "litellm/gemini-2.5-flash", cfg.ModelRef())
	primary, _ := cfg.Lookup("agents.defaults.model.primary")
	assert.Equal(t, cfg.ModelRef(), primary)
	ws, _ := cfg.Lookup("agents.entries.main.workspace")
	assert.Equal(t, port.WorkspacePath, ws)
	timeout, _ := cfg.Lookup("agents.defaults.timeoutSeconds")
	assert.Equal(t, json.Number("540"), timeout)
	cost, _ := cfg.Lookup("models.providers.litellm.models")
	for _, m := range cost.([]any) {
		assert.Equal(t, map[string]any{"input": json.Number("0"), "output": json.Number("0"), "cacheRead": json.Number("0"), "cacheWrite": json.Number("0")}, m.(map[string]any)["cost"])
	}
	assert.False(t, cfg.Gateway())
	assert.Equal(t, os.FileMode(0o644), cfg.FileMode())
	plugins, _ := cfg.Lookup("plugins")
	assert.Equal(t, map[string]any{"enabled": false}, plugins, "plugins are off unless WithPlugins names some")
}

func TestConfigPluginsAllowed(t *testing.T) {
	cfg, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...), openclaw.WithPlugins("memory-core"), openclaw.WithPlugins("@acme/notes", "memory-core"))
	require.NoError(t, err)
	plugins, _ := cfg.Lookup("plugins")
	assert.Equal(t, map[string]any{"enabled": true, "allow": []any{"@acme/notes", "memory-core"}}, plugins)
	cfg, err = openclaw.NewConfig(openclaw.WithModels(testModels(t)...), openclaw.WithPlugins())
	require.NoError(t, err)
	plugins, _ = cfg.Lookup("plugins")
	assert.Equal(t, map[string]any{"enabled": false}, plugins, "no ids: still off")
}

func TestConfigGatewayToken(t *testing.T) {
	literal, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...),
		openclaw.WithGateway(openclaw.Gateway{Port: 1234, Token: "tok-0123456789abcdef"}))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), literal.FileMode(), "a file holding a token is private")
	tok, _ := literal.Lookup("gateway.auth.token")
	assert.Equal(t, "tok-0123456789abcdef", tok)
	bind, _ := literal.Lookup("gateway.bind")
	assert.Equal(t, "loopback", bind)

	ref, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...),
		openclaw.WithGateway(openclaw.Gateway{Port: 1234, TokenEnv: "GW_TOKEN"}))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), ref.FileMode(), "a secret reference is not a secret")
	tok, _ = ref.Lookup("gateway.auth.token")
	assert.Equal(t, map[string]any{"source": "env", "provider": "default", "id": "GW_TOKEN"}, tok)
	deny, _ := ref.Lookup("tools.deny")
	assert.NotContains(t, deny, "group:web", "gateway deployments decide their own egress")
}

func TestConfigWriteFile(t *testing.T) {
	cfg, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...),
		openclaw.WithGateway(openclaw.Gateway{Port: 1234, Token: "tok-0123456789abcdef"}))
	require.NoError(t, err)
	name := filepath.Join(t.TempDir(), "sub", "openclaw.json")
	require.NoError(t, cfg.WriteFile(name))
	fi, err := os.Stat(name)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	assert.Equal(t, cfg.JSON(), b)
	entries, err := os.ReadDir(filepath.Dir(name))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

// requireSettingError checks err is a *SettingError for setting, matching
// port.ErrInvalidSpec, and ErrInvariant exactly when inv is set.
func requireSettingError(t *testing.T, err error, setting string, inv openclaw.Invariant) {
	t.Helper()
	require.Error(t, err)
	var se *openclaw.SettingError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, setting, se.Setting)
	assert.Equal(t, inv, se.Invariant)
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
	assert.Equal(t, inv != "", errors.Is(err, openclaw.ErrInvariant))
	assert.Contains(t, err.Error(), setting)
}

func TestConfigRefusesInvariantBreaks(t *testing.T) {
	cases := []struct {
		path  string
		value any
		inv   openclaw.Invariant
	}{
		{"agents.defaults.sandbox.mode", "all", openclaw.InvSandboxOff},
		{"agents.defaults.sandbox", map[string]any{"mode": "non-main"}, openclaw.InvSandboxOff},
		{"agents.defaults.sandbox", map[string]any{}, openclaw.InvSandboxOff},
		{"agents.entries.main.sandbox.mode", "all", openclaw.InvSandboxOff},
		{"cron.enabled", true, openclaw.InvCronOff},
		{"cron", map[string]any{"enabled": true}, openclaw.InvCronOff},
		{"cron", map[string]any{}, openclaw.InvCronOff},
		{"tools.elevated.enabled", true, openclaw.InvElevatedOff},
		{"tools.elevated", map[string]any{"enabled": true, "allowFrom": map[string]any{}}, openclaw.InvElevatedOff},
		{"agents.defaults.elevatedDefault", "full", openclaw.InvElevatedOff},
		{"agents.entries.main.tools.elevated.enabled", true, openclaw.InvElevatedOff},
		{"agents.defaults.heartbeat.every", "30m", openclaw.InvHeartbeatOff},
		{"agents.defaults.heartbeat", map[string]any{"target": "last"}, openclaw.InvHeartbeatOff},
		{"agents.entries.main.heartbeat.every", "5m", openclaw.InvHeartbeatOff},
		{"models.mode", "merge", openclaw.InvSingleProvider},
		{"models.providers.openai", map[string]any{"baseUrl": "https://api.openai.com/v1", "models": []any{}}, openclaw.InvSingleProvider},
		{"models.providers.litellm.baseUrl", "https://evil.example/v1", openclaw.InvSingleProvider},
		{"models.catalogRefresh.enabled", true, openclaw.InvSingleProvider},
		{"agents.defaults.model", "openai/gpt-5", openclaw.InvSingleProvider},
		{"agents.defaults.model.fallbacks", []string{"openai/gpt-5"}, openclaw.InvSingleProvider},
		{"agents.entries.main.model", "anthropic/claude-opus-4-6", openclaw.InvSingleProvider},
		{"tools.deny", []string{"browser"}, openclaw.InvToolDeny},
		{"tools.allow", []string{"read", "cron"}, openclaw.InvToolDeny},
		{"tools.alsoAllow", []string{"browser"}, openclaw.InvToolDeny},
		{"agents.entries.main.tools.allow", []string{"sessions_spawn"}, openclaw.InvToolDeny},
		{"gateway.tools.allow", []string{"gateway"}, openclaw.InvToolDeny},
		{"update.checkOnStart", true, openclaw.InvOffline},
		{"update.auto.enabled", true, openclaw.InvOffline},
		{"discovery.mdns.mode", "full", openclaw.InvOffline},
		{"proxy", map[string]any{"enabled": true, "proxyUrl": "http://egress:3128"}, openclaw.InvOffline},
		{"gateway.controlUi.enabled", true, openclaw.InvGatewayAuth},
		{"gateway.auth", map[string]any{"mode": "none"}, openclaw.InvGatewayAuth},
		{"gateway.bind", "lan", openclaw.InvGatewayAuth},
		{"gateway.port", 18789, openclaw.InvGatewayAuth},
		{"gateway.mode", "remote", openclaw.InvGatewayAuth},
		{"gateway.tailscale", map[string]any{"mode": "funnel"}, openclaw.InvGatewayAuth},
		{"agents.list", []any{map[string]any{"id": "main"}}, openclaw.InvSingleAgent},
		{"agents.entries.ops", map[string]any{"workspace": "/tmp/ops"}, openclaw.InvSingleAgent},
		{"agents.entries", map[string]any{"other": map[string]any{}}, openclaw.InvSingleAgent},
		{"agents.entries.main.workspace", "/", openclaw.InvSingleAgent},
		{"agents.defaults.workspace", "/etc", openclaw.InvSingleAgent},
		{"agents.entries.main.runtime", map[string]any{"type": "acp"}, openclaw.InvSingleAgent},
		{"agents.ownership", "explicit", openclaw.InvSingleAgent},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...), openclaw.WithSetting(tc.path, tc.value))
			requireSettingError(t, err, tc.path, tc.inv)
		})
	}
}

func TestConfigRefusesGatewayAuthChangesInGatewayMode(t *testing.T) {
	gw := openclaw.WithGateway(openclaw.Gateway{Port: 1234, Token: "tok-0123456789abcdef"})
	for path, v := range map[string]any{
		"gateway.auth.mode":  "none",
		"gateway.auth.token": "short",
		"gateway.auth":       map[string]any{"mode": "password", "password": "x"},
		"gateway.bind":       "lan",
	} {
		t.Run(path, func(t *testing.T) {
			_, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...), gw, openclaw.WithSetting(path, v))
			requireSettingError(t, err, path, openclaw.InvGatewayAuth)
			assert.NotContains(t, err.Error(), "tok-0123456789abcdef", "errors never echo the token")
		})
	}
}

func TestConfigNamesTheOffendingSetting(t *testing.T) {
	_, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...),
		openclaw.WithSetting("agents.defaults.thinkingDefault", "low"),
		openclaw.WithSetting("agents", map[string]any{"defaults": map[string]any{"sandbox": map[string]any{"mode": "off"}}}),
	)
	var se *openclaw.SettingError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "agents", se.Setting, "replacing the agents object drops the heartbeat and model the builder owns")
	assert.NotEmpty(t, se.Invariant)
}

func TestConfigAllowsOtherSettings(t *testing.T) {
	cfg, err := openclaw.NewConfig(openclaw.WithModels(testModels(t)...),
		openclaw.WithSetting("agents.defaults.thinkingDefault", "low"),
		openclaw.WithSetting("agents.defaults.heartbeat.every", "0m"), // unchanged
		openclaw.WithSetting("agents.entries.main.sandbox.mode", "off"),
		openclaw.WithSetting("agents.entries.main.heartbeat.every", "0m"),
		openclaw.WithSetting("agents.entries.main.identity", map[string]string{"name": "Builder"}),
		openclaw.WithSetting("tools.profile", "coding"),
		openclaw.WithSetting("tools.allow", []string{"read", "write", "exec"}),
	)
	require.NoError(t, err)
	v, _ := cfg.Lookup("agents.defaults.thinkingDefault")
	assert.Equal(t, "low", v)
	v, _ = cfg.Lookup("agents.entries.main.identity.name")
	assert.Equal(t, "Builder", v)
	v, _ = cfg.Lookup("tools.allow")
	assert.Equal(t, []any{"read", "write", "exec"}, v)
}

func TestConfigOptionErrors(t *testing.T) {
	m := openclaw.WithModels(testModels(t)...)
	cases := []struct {
		name    string
		opts    []openclaw.Option
		setting string
		inv     openclaw.Invariant
	}{
		{"no models", nil, "models.providers.*.models", ""},
		{"empty catalog", []openclaw.Option{openclaw.WithModels()}, "models.providers.*.models", ""},
		{"duplicate model", []openclaw.Option{openclaw.WithModels(testModels(t)[0], testModels(t)[0])}, "models.providers.*.models", ""},
		{"bad model", []openclaw.Option{openclaw.WithModels(openclaw.Model{ID: "a b", ContextWindow: 1, MaxTokens: 1})}, "models.providers.*.models", ""},
		{"unknown default model", []openclaw.Option{m, openclaw.WithDefaultModel("gpt-5")}, "agents.defaults.model.primary", ""},
		{"base url scheme", []openclaw.Option{m, openclaw.WithBaseURL("file:///etc/passwd")}, "models.providers.*.baseUrl", ""},
		{"base url credentials", []openclaw.Option{m, openclaw.WithBaseURL("http://user:pw@proxy/v1")}, "models.providers.*.baseUrl", ""},
		{"base url query", []openclaw.Option{m, openclaw.WithBaseURL("http://proxy/v1?x=1")}, "models.providers.*.baseUrl", ""},
		{"provider name", []openclaw.Option{m, openclaw.WithProviderName("Bad Name")}, "models.providers", ""},
		{"relative workspace", []openclaw.Option{m, openclaw.WithWorkspace("ws")}, "agents.defaults.workspace", ""},
		{"agent id", []openclaw.Option{m, openclaw.WithAgentID("Main")}, "agents.entries", ""},
		{"timeout", []openclaw.Option{m, openclaw.WithAgentTimeout(-time.Second)}, "agents.defaults.timeoutSeconds", ""},
		{"gateway port", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 0, Token: "tok-0123456789abcdef"})}, "gateway.port", ""},
		{"gateway bind", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 1, Bind: "tailnet", Token: "tok-0123456789abcdef"})}, "gateway.bind", ""},
		{"gateway no token", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 1})}, "gateway.auth.token", openclaw.InvGatewayAuth},
		{"gateway two tokens", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 1, Token: "tok-0123456789abcdef", TokenEnv: "T"})}, "gateway.auth.token", openclaw.InvGatewayAuth},
		{"gateway short token", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 1, Token: "short"})}, "gateway.auth.token", openclaw.InvGatewayAuth},
		{"gateway token env", []openclaw.Option{m, openclaw.WithGateway(openclaw.Gateway{Port: 1, TokenEnv: "lower"})}, "gateway.auth.token", ""},
		{"deny name", []openclaw.Option{m, openclaw.WithDeny("rm -rf")}, "tools.deny", ""},
		{"plugin id", []openclaw.Option{m, openclaw.WithPlugins("../evil")}, "plugins.allow", ""},
		{"plugin id upper case", []openclaw.Option{m, openclaw.WithPlugins("Memory-Core")}, "plugins.allow", ""},
		{"plugin id empty", []openclaw.Option{m, openclaw.WithPlugins("")}, "plugins.allow", ""},
		{"plugin id scope only", []openclaw.Option{m, openclaw.WithPlugins("@acme/")}, "plugins.allow", ""},
		{"setting path", []openclaw.Option{m, openclaw.WithSetting("agents..defaults", 1)}, "agents..defaults", ""},
		{"setting value", []openclaw.Option{m, openclaw.WithSetting("agents.defaults.x", make(chan int))}, "agents.defaults.x", ""},
		{"setting through a scalar", []openclaw.Option{m, openclaw.WithSetting("cron.enabled.deeper", true)}, "cron.enabled.deeper", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := openclaw.NewConfig(tc.opts...)
			assert.Nil(t, cfg)
			requireSettingError(t, err, tc.setting, tc.inv)
		})
	}
}

func TestNewModel(t *testing.T) {
	m, err := openclaw.NewModel("gpt-5", "", 400000, 128000)
	require.NoError(t, err)
	assert.Equal(t, openclaw.Model{ID: "gpt-5", ContextWindow: 400000, MaxTokens: 128000}, m)

	for name, tc := range map[string]struct {
		id, display string
		cw, mt      int
	}{
		"empty id":        {"", "x", 1, 1},
		"space in id":     {"gpt 5", "x", 1, 1},
		"newline in id":   {"gpt\n5", "x", 1, 1},
		"control in name": {"gpt-5", "a\x00b", 1, 1},
		"zero window":     {"gpt-5", "", 0, 1},
		"zero max tokens": {"gpt-5", "", 10, 0},
		"max over window": {"gpt-5", "", 10, 11},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := openclaw.NewModel(tc.id, tc.display, tc.cw, tc.mt)
			requireSettingError(t, err, "models.providers.*.models", "")
		})
	}
}
