package proxypolicy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// The shared nginx proxy: for users who want the seed's OpenResty-style shared
// proxy instead of the Go daemon (cmd/sandbox-proxyd). One nginx serves many
// runs, one unix socket each, and an njs script verifies every request's run
// token with exactly the rules of package runtoken (the same test table holds
// both to the same answers). The rendered files hold no secret: nginx reads the
// token secrets (PROXYD_SECRET, PROXYD_PREVIOUS_SECRET, hex) and the LiteLLM key
// (LITELLM_API_KEY) from its environment.

//go:embed templates/shared.conf.tmpl
var sharedConfTmpl string

//go:embed templates/runtoken.js
var sharedScript string

var sharedTmpl = template.Must(template.New("shared").Parse(sharedConfTmpl))

// DefaultNJSModule is Debian's path of the njs HTTP module (libnginx-mod-http-js).
const DefaultNJSModule = "/usr/lib/nginx/modules/ngx_http_js_module.so"

// SharedRun is one run of the shared nginx proxy.
type SharedRun struct {
	// Policy is the run's validated header policy (NewPolicy); its key is not
	// rendered (the key comes from LITELLM_API_KEY).
	Policy *Policy
	// Attempt is the run's attempt, which its token must name.
	Attempt int
	// Socket is the absolute path nginx listens on for the run.
	Socket string
}

// SharedConfig is the shared nginx proxy's configuration.
type SharedConfig struct {
	Runs []SharedRun
	// Upstream is the LiteLLM base URL, http://host:port.
	Upstream string
	// RuntimeDir holds the pid file, error log and temporary files (absolute).
	RuntimeDir string
	// ScriptPath is where the caller writes the rendered script (absolute).
	ScriptPath string
	// ModulePath is the njs module (default DefaultNJSModule).
	ModulePath string
	// Skew and MaxTTL are the token rules (runtoken.DefaultSkew, DefaultTTL when zero).
	Skew, MaxTTL time.Duration
	// MaxBodyBytes bounds request bodies (default 64 MiB).
	MaxBodyBytes int64
}

type sharedRunView struct {
	Key, RunID, Socket string
}

type sharedJSRun struct {
	RunID    string `json:"run_id"`
	Attempt  int    `json:"attempt"`
	EndUser  string `json:"end_user"`
	Metadata string `json:"metadata"`
}

// safePath is a path nginx reads as one token without quoting.
func safePath(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsAny(p, " \t\r\n;'\"{}$#\\")
}

// RenderShared renders the nginx configuration and the njs script of a shared
// proxy. Errors wrap port.ErrInvalidSpec.
func RenderShared(cfg SharedConfig) (conf, script []byte, err error) {
	if cfg.ModulePath == "" {
		cfg.ModulePath = DefaultNJSModule
	}
	if cfg.Skew <= 0 {
		cfg.Skew = 30 * time.Second
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = 24 * time.Hour
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	for _, p := range []string{cfg.RuntimeDir, cfg.ScriptPath, cfg.ModulePath} {
		if !safePath(p) {
			return nil, nil, port.Invalidf("shared nginx: path %q is not absolute and clean, or has characters nginx would misread", p)
		}
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" ||
		strings.ContainsAny(u.Host, " ;'\"{}$") {
		return nil, nil, port.Invalidf("shared nginx: upstream %q is not http://host:port", cfg.Upstream)
	}
	if len(cfg.Runs) == 0 {
		return nil, nil, port.Invalidf("shared nginx: no runs")
	}
	views := make([]sharedRunView, 0, len(cfg.Runs))
	js := map[string]sharedJSRun{}
	seen := map[string]bool{}
	for i, r := range cfg.Runs {
		if r.Policy == nil || !safePath(r.Socket) || seen[r.Socket] || r.Attempt < 0 {
			return nil, nil, port.Invalidf("shared nginx: run %d has no policy, a bad or repeated socket path, or a negative attempt", i)
		}
		seen[r.Socket] = true
		key := "r" + strconv.Itoa(i)
		jr := sharedJSRun{RunID: r.Policy.RunID(), Attempt: r.Attempt}
		for _, h := range r.Policy.Injected() {
			switch h.Name {
			case HeaderEndUserID:
				jr.EndUser = h.Value
			case HeaderSpendLogsMetadata:
				jr.Metadata = h.Value
			}
		}
		js[key] = jr
		views = append(views, sharedRunView{Key: key, RunID: r.Policy.RunID(), Socket: r.Socket})
	}
	var buf bytes.Buffer
	if err := sharedTmpl.Execute(&buf, map[string]any{
		"ModulePath": cfg.ModulePath, "RuntimeDir": cfg.RuntimeDir, "ScriptPath": cfg.ScriptPath,
		"UpstreamHost": u.Host, "Runs": views, "MaxBodyBytes": cfg.MaxBodyBytes,
	}); err != nil {
		return nil, nil, fmt.Errorf("shared nginx: %w", err)
	}
	runs, err := json.Marshal(js) // escapes <, >, & and line separators: safe inside a script
	if err != nil {
		return nil, nil, fmt.Errorf("shared nginx: %w", err)
	}
	s := strings.NewReplacer("__RUNS__", string(runs),
		"__SKEW_MS__", strconv.FormatInt(cfg.Skew.Milliseconds(), 10),
		"__MAX_TTL_MS__", strconv.FormatInt(cfg.MaxTTL.Milliseconds(), 10)).Replace(sharedScript)
	return buf.Bytes(), []byte(s), nil
}
