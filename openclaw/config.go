package openclaw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/agentsandbox/sandbox/port"
)

// Defaults used by NewConfig.
const (
	// DefaultProvider is the name of the single model provider; model references
	// read "litellm/<model id>".
	DefaultProvider = "litellm"
	// DefaultAgentID is the id of the one agent, the key under agents.entries.
	DefaultAgentID = "main"
	// DefaultAgentTimeout is agents.defaults.timeoutSeconds: under the runner's
	// default 10-minute limit so OpenClaw ends a turn cleanly before it is killed.
	DefaultAgentTimeout = 540 * time.Second
	// DefaultBaseURL is where the provider sends requests inside a sandbox: the
	// in-sandbox bridge (port.BridgeAddr) in front of the per-run proxy. It is an
	// address, not "localhost", because the bridge listens on IPv4 loopback only and
	// Node may try ::1 first.
	DefaultBaseURL = "http://" + port.BridgeAddr + "/v1"
	// PlaceholderAPIKey is the provider's apiKey. OpenClaw requires one; the proxy
	// strips the Authorization header and injects the real key, so the value never
	// matters and no secret is ever written here.
	PlaceholderAPIKey = "proxy-injects-auth"
)

// baseDeny are the tools denied in every config (the seed's list): no browser,
// no scheduler, no gateway control, no device mesh, no cross-session messaging or
// spawning, no channel delivery.
var baseDeny = []string{"browser", "cron", "gateway", "message", "nodes", "sessions_send", "sessions_spawn"}

// sandboxDeny are denied in addition in sandbox mode, where there is no network:
// web tools could only fail and confuse the agent.
var sandboxDeny = []string{"group:web"}

// RequiredDeny returns the tools every config denies: gateway reports the
// gateway-mode list, otherwise the sandbox-mode list (which also denies group:web).
func RequiredDeny(gateway bool) []string {
	if gateway {
		return slices.Clone(baseDeny)
	}
	return sortedSet(baseDeny, sandboxDeny)
}

// Gateway configures gateway mode: a long-running `openclaw gateway` that clients
// reach over WebSocket with token auth. Exactly one of Token and TokenEnv is set.
type Gateway struct {
	// Port is the gateway's port (1-65535).
	Port int
	// Bind is "loopback" (the default) or "lan" (all interfaces, for a gateway in
	// a container reached over an internal network).
	Bind string
	// Token is the shared token, written into the config (which then gets mode
	// 0600 from WriteFile).
	Token string
	// TokenEnv names an environment variable holding the token; the config holds
	// only an env secret reference, so the token never touches the file.
	TokenEnv string
}

// Option configures NewConfig. Options validate their input and fail with a
// *SettingError.
type Option func(*config) error

type setting struct {
	path  string
	keys  []string
	value any
}

type config struct {
	models       []Model
	defaultModel string
	provider     string
	baseURL      string
	workspace    string
	agentID      string
	timeout      time.Duration
	gateway      *Gateway
	deny         []string
	plugins      []string
	settings     []setting
}

var (
	agentIDRE  = regexp.MustCompile(`^[a-z0-9_][a-z0-9_-]{0,63}$`)
	providerRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
	envNameRE  = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,127}$`)
	toolRE     = regexp.MustCompile(`^[A-Za-z0-9_:*.-]{1,128}$`)
	// pluginRE is OpenClaw's own plugin id syntax (a name, or an npm-scoped one).
	pluginRE = regexp.MustCompile(`^(?:[a-z0-9][a-z0-9._-]{0,127}|@[a-z0-9][a-z0-9._-]{0,63}/[a-z0-9][a-z0-9._-]{0,127})$`)
)

// WithModels sets the provider's model catalog (required, at least one model).
// Costs are always written as zero: LiteLLM is the billing truth.
func WithModels(models ...Model) Option {
	return func(c *config) error {
		if len(models) == 0 {
			return &SettingError{Setting: "models.providers.*.models", Reason: "the catalog is empty"}
		}
		seen := map[string]bool{}
		for _, m := range models {
			if err := m.validate(); err != nil {
				return err
			}
			if seen[m.ID] {
				return &SettingError{Setting: "models.providers.*.models", Reason: "model " + quote(m.ID) + " is listed twice"}
			}
			seen[m.ID] = true
		}
		c.models = slices.Clone(models)
		return nil
	}
}

// WithDefaultModel names the catalog model the agent uses unless a run picks
// another (default: the first model in the catalog).
func WithDefaultModel(id string) Option {
	return func(c *config) error {
		if id == "" {
			return &SettingError{Setting: "agents.defaults.model.primary", Reason: "model id is empty"}
		}
		c.defaultModel = id
		return nil
	}
}

// WithBaseURL sets the provider's base URL (default DefaultBaseURL, the in-sandbox
// bridge). Gateway deployments point it at their proxy, e.g.
// "http://llm-proxy:8080/v1". The URL must be http or https without credentials,
// query or fragment.
func WithBaseURL(u string) Option {
	return func(c *config) error {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" || strings.ContainsAny(u, " \t\r\n") {
			return &SettingError{Setting: "models.providers.*.baseUrl", Reason: quote(u) + " is not an http(s) URL without credentials, query or fragment"}
		}
		c.baseURL = strings.TrimRight(u, "/")
		return nil
	}
}

// WithProviderName renames the single provider (default DefaultProvider).
func WithProviderName(name string) Option {
	return func(c *config) error {
		if !providerRE.MatchString(name) {
			return &SettingError{Setting: "models.providers", Reason: "provider name " + quote(name) + " must match " + providerRE.String()}
		}
		c.provider = name
		return nil
	}
}

// WithWorkspace sets the agent's workspace directory as OpenClaw sees it
// (default port.WorkspacePath). It must be absolute.
func WithWorkspace(dir string) Option {
	return func(c *config) error {
		if !path.IsAbs(dir) || strings.ContainsAny(dir, "\x00\r\n") {
			return &SettingError{Setting: "agents.defaults.workspace", Reason: quote(dir) + " is not an absolute path"}
		}
		c.workspace = path.Clean(dir)
		return nil
	}
}

// WithAgentID sets the id of the single agent (default DefaultAgentID).
func WithAgentID(id string) Option {
	return func(c *config) error {
		if !agentIDRE.MatchString(id) {
			return &SettingError{Setting: "agents.entries", Reason: "agent id " + quote(id) + " must match " + agentIDRE.String()}
		}
		c.agentID = id
		return nil
	}
}

// WithAgentTimeout sets agents.defaults.timeoutSeconds, OpenClaw's own limit for
// one agent turn (default DefaultAgentTimeout). Keep it below the sandbox's
// limit so the turn ends cleanly. It is rounded up to whole seconds.
func WithAgentTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > 48*time.Hour {
			return &SettingError{Setting: "agents.defaults.timeoutSeconds", Reason: fmt.Sprintf("timeout %v is not in (0, 48h]", d)}
		}
		c.timeout = d
		return nil
	}
}

// WithGateway switches to gateway mode: gateway.auth uses the token, the bind
// address is g.Bind, and web tools stay allowed (a gateway deployment decides
// its own egress).
func WithGateway(g Gateway) Option {
	return func(c *config) error {
		if g.Port < 1 || g.Port > 65535 {
			return &SettingError{Setting: "gateway.port", Reason: fmt.Sprintf("port %d is not in 1-65535", g.Port)}
		}
		switch g.Bind {
		case "":
			g.Bind = "loopback"
		case "loopback", "lan":
		default:
			return &SettingError{Setting: "gateway.bind", Reason: "bind " + quote(g.Bind) + " is not \"loopback\" or \"lan\""}
		}
		if (g.Token == "") == (g.TokenEnv == "") {
			return &SettingError{Setting: "gateway.auth.token", Invariant: InvGatewayAuth, Reason: "exactly one of Token and TokenEnv must be set"}
		}
		if g.Token != "" && (len(g.Token) < 16 || strings.IndexFunc(g.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0) {
			return &SettingError{Setting: "gateway.auth.token", Invariant: InvGatewayAuth, Reason: "token must be at least 16 bytes without whitespace or control characters"}
		}
		if g.TokenEnv != "" && !envNameRE.MatchString(g.TokenEnv) {
			return &SettingError{Setting: "gateway.auth.token", Reason: "env name " + quote(g.TokenEnv) + " must match " + envNameRE.String()}
		}
		c.gateway = &g
		return nil
	}
}

// WithDeny denies more tools (names or groups such as "group:media") besides the
// required ones.
func WithDeny(tools ...string) Option {
	return func(c *config) error {
		for _, t := range tools {
			if !toolRE.MatchString(t) {
				return &SettingError{Setting: "tools.deny", Reason: "tool name " + quote(t) + " must match " + toolRE.String()}
			}
		}
		c.deny = append(c.deny, tools...)
		return nil
	}
}

// WithPlugins lets the agent load these OpenClaw plugins and no others (OpenClaw's
// plugins.allow, an exclusive allowlist). Without it the config turns plugins off
// (plugins.enabled false): OpenClaw then skips plugin discovery and loading (0.84 s
// of a pre-booted run's boot on the host, docs/benchmarks.md), and the agent is offered none of the tools of its
// default-on plugins, which a sandbox without network or paired devices cannot use
// (canvas, file transfer to paired nodes, Ollama on nodes, talk voice) or which need
// the host's choice (memory-core's memory_search and memory_get). Ids are OpenClaw's
// plugin ids, e.g. "memory-core"; a pre-booted slot warms up without plugins, so a
// run that allows some loads them after its claim.
func WithPlugins(ids ...string) Option {
	return func(c *config) error {
		for _, id := range ids {
			if !pluginRE.MatchString(id) {
				return &SettingError{Setting: "plugins.allow", Reason: "plugin id " + quote(id) + " must match " + pluginRE.String()}
			}
		}
		c.plugins = sortedSet(c.plugins, ids)
		return nil
	}
}

// WithSetting sets any other config value by dotted path, e.g.
// WithSetting("agents.defaults.thinkingDefault", "low"). value is anything that
// marshals to JSON; a map value replaces the whole object at path. Keys that
// contain dots are reached by setting their parent object.
//
// Settings apply in order, after everything the builder generates. A setting that
// would break an invariant, or change a value the builder owns (the model
// provider, the agent's model and workspace, gateway bind and auth, ...), is
// refused by NewConfig with a *SettingError naming path. OpenClaw itself rejects
// unknown keys, which `openclaw config validate` reports; this package does not
// duplicate OpenClaw's schema.
func WithSetting(path string, value any) Option {
	return func(c *config) error {
		keys := strings.Split(path, ".")
		for _, k := range keys {
			if k == "" || strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				return &SettingError{Setting: path, Reason: "path must be dot-separated non-empty keys without whitespace"}
			}
		}
		v, err := normalize(value)
		if err != nil {
			return &SettingError{Setting: path, Reason: "value does not marshal to JSON: " + err.Error()}
		}
		c.settings = append(c.settings, setting{path: path, keys: keys, value: v})
		return nil
	}
}

// Config is a generated openclaw.json. It is immutable; marshal it with
// MarshalJSON or JSON, or write it with WriteFile.
type Config struct {
	tree     map[string]any
	gateway  bool
	secret   bool // the file holds a literal gateway token
	modelRef string
}

// NewConfig builds a config from the options. It does no I/O. Errors are
// *SettingError values (errors.Is(err, port.ErrInvalidSpec); ErrInvariant too
// when a setting would break an invariant).
func NewConfig(opts ...Option) (*Config, error) {
	c := &config{
		provider:  DefaultProvider,
		baseURL:   DefaultBaseURL,
		workspace: port.WorkspacePath,
		agentID:   DefaultAgentID,
		timeout:   DefaultAgentTimeout,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if len(c.models) == 0 {
		return nil, &SettingError{Setting: "models.providers.*.models", Reason: "no models: use WithModels"}
	}
	if c.defaultModel == "" {
		c.defaultModel = c.models[0].ID
	}
	if !slices.ContainsFunc(c.models, func(m Model) bool { return m.ID == c.defaultModel }) {
		return nil, &SettingError{Setting: "agents.defaults.model.primary", Reason: "model " + quote(c.defaultModel) + " is not in the catalog"}
	}

	base, err := normalizeTree(c.base())
	if err != nil {
		return nil, fmt.Errorf("openclaw config: %w", err) // cannot happen: the base is plain data
	}
	rules := c.rules()
	if err := rules.check(base, base, "(generated)"); err != nil {
		return nil, err // a bug in the builder, or an option combination it refuses
	}
	tree := deepCopy(base).(map[string]any)
	for _, s := range c.settings {
		if err := setPath(tree, s.keys, deepCopy(s.value)); err != nil {
			return nil, &SettingError{Setting: s.path, Reason: err.Error()}
		}
		// Checked after each setting so the error names the one that broke it.
		if err := rules.check(tree, base, s.path); err != nil {
			return nil, err
		}
	}
	return &Config{
		tree:     tree,
		gateway:  c.gateway != nil,
		secret:   c.gateway != nil && c.gateway.Token != "",
		modelRef: c.provider + "/" + c.defaultModel,
	}, nil
}

// base is the generated config before extra settings.
func (c *config) base() map[string]any {
	deny := RequiredDeny(c.gateway != nil)
	deny = sortedSet(deny, c.deny)

	gw := map[string]any{
		"mode":      "local",
		"controlUi": map[string]any{"enabled": false},
	}
	if g := c.gateway; g != nil {
		gw["port"] = g.Port
		gw["bind"] = g.Bind
		auth := map[string]any{"mode": "token"}
		if g.Token != "" {
			auth["token"] = g.Token
		} else {
			auth["token"] = map[string]any{"source": "env", "provider": "default", "id": g.TokenEnv}
		}
		gw["auth"] = auth
	}
	return map[string]any{
		"agents": map[string]any{
			"defaults": map[string]any{
				"model":           map[string]any{"primary": c.provider + "/" + c.defaultModel, "fallbacks": []any{}},
				"workspace":       c.workspace,
				"sandbox":         map[string]any{"mode": "off"},
				"heartbeat":       map[string]any{"every": "0m"},
				"elevatedDefault": "off",
				"skipBootstrap":   true,
				"timeoutSeconds":  int64((c.timeout + time.Second - 1) / time.Second),
			},
			"entries": map[string]any{
				c.agentID: map[string]any{"workspace": c.workspace},
			},
		},
		"models": map[string]any{
			"mode":           "replace",
			"catalogRefresh": map[string]any{"enabled": false},
			"providers":      map[string]any{c.provider: providerEntry(c.baseURL, c.models)},
		},
		"tools": map[string]any{
			"deny":     toAny(deny),
			"elevated": map[string]any{"enabled": false},
			// A background command finishing would otherwise wake the agent for a
			// turn of its own: an LLM call outside any run.
			"exec": map[string]any{"notifyOnExit": false},
		},
		"cron":      map[string]any{"enabled": false},
		"update":    map[string]any{"checkOnStart": false, "auto": map[string]any{"enabled": false}},
		"discovery": map[string]any{"mdns": map[string]any{"mode": "off"}},
		"gateway":   gw,
		"plugins":   c.pluginPolicy(),
	}
}

// pluginPolicy is the plugins object: off, or exactly the allowed ones (WithPlugins).
func (c *config) pluginPolicy() map[string]any {
	if len(c.plugins) == 0 {
		return map[string]any{"enabled": false}
	}
	return map[string]any{"enabled": true, "allow": toAny(c.plugins)}
}

// MarshalJSON returns the config as compact JSON. Output is deterministic: object
// keys are sorted and arrays keep their order.
func (c *Config) MarshalJSON() ([]byte, error) { return encode(c.tree, "") }

// JSON returns the config as indented JSON ending in a newline, deterministic like
// MarshalJSON.
func (c *Config) JSON() []byte {
	b, err := encode(c.tree, "  ")
	if err != nil {
		panic("openclaw: config does not marshal: " + err.Error()) // the tree is normalized JSON data
	}
	return b
}

// Lookup returns the value at a dotted path, as decoded JSON (maps, slices,
// strings, bools, json.Number), or false if there is none. The value is a copy.
func (c *Config) Lookup(path string) (any, bool) {
	v, ok := lookup(c.tree, strings.Split(path, "."))
	if !ok {
		return nil, false
	}
	return deepCopy(v), true
}

// ModelRef is the default model's reference, "<provider>/<model id>", as used by
// `--model` and the gateway's sessions.patch.
func (c *Config) ModelRef() string { return c.modelRef }

// Gateway reports whether the config is for gateway mode.
func (c *Config) Gateway() bool { return c.gateway }

// FileMode is the permission WriteFile uses: 0600 when the file holds a literal
// gateway token, else 0644 so a sandbox user other than the writer can read it
// (nothing secret is in it: the provider key is a placeholder).
func (c *Config) FileMode() os.FileMode {
	if c.secret {
		return 0o600
	}
	return 0o644
}

// WriteFile writes the config to name (creating its directory), atomically: a
// reader sees the old file or the new one, never a partial one. name is a host path
// the caller owns (a gateway's config directory): its directories are created and
// followed as they are. A workspace an agent may have used is written with
// OneShot.Prepare, which never follows what the agent left there.
func (c *Config) WriteFile(name string) error {
	return writeFileAtomic(name, c.JSON(), c.FileMode())
}

func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this is a no-op
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	// CreateTemp makes 0600 files; Chmod sets the exact mode whatever the umask.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func encode(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if indent == "" {
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
	}
	return buf.Bytes(), nil
}

// normalize turns any JSON-marshalable value into decoded JSON data, so values
// compare with reflect-free deep equality and marshal deterministically.
func normalize(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func normalizeTree(m map[string]any) (map[string]any, error) {
	v, err := normalize(m)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	default:
		return v
	}
}

func equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func lookup(m map[string]any, keys []string) (any, bool) {
	var cur any = m
	for _, k := range keys {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func setPath(m map[string]any, keys []string, v any) error {
	cur := m
	for i, k := range keys[:len(keys)-1] {
		next, ok := cur[k]
		if !ok {
			n := map[string]any{}
			cur[k] = n
			cur = n
			continue
		}
		obj, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is not an object", strings.Join(keys[:i+1], "."))
		}
		cur = obj
	}
	cur[keys[len(keys)-1]] = v
	return nil
}

func sortedSet(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}
