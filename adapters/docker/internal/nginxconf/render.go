package nginxconf

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Defaults of NginxConfig.
const (
	// DefaultSocketPath is where the per-run proxy listens: the socket directory the
	// sandbox mounts at port.LLMSocketDir.
	DefaultSocketPath = port.LLMSocketDir + "/" + port.LLMSocketName
	// DefaultAuditLogPath is the audit log inside the proxy. Its directory must not be
	// shared with the sandbox (the sandbox would otherwise be able to forge records).
	DefaultAuditLogPath = "/var/log/llmproxy/audit.log"
	// DefaultRuntimeDir holds nginx's pid file and temporary directories. It must exist
	// and be writable by nginx; /tmp is a tmpfs in a read-only proxy container.
	DefaultRuntimeDir = "/tmp"
	// DefaultReadTimeout is the longest silence allowed between two reads or writes on
	// either side of a call: long, because slow models stream with long pauses.
	DefaultReadTimeout = time.Hour
	// DefaultConnectTimeout bounds connecting to the upstream.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMaxBodyBytes bounds a request body (the in-process proxy's default too).
	DefaultMaxBodyBytes = 64 << 20
)

// NginxConfig describes one per-run nginx proxy. Zero fields take the defaults above;
// Policy and Upstream are required.
type NginxConfig struct {
	// Policy is the validated header policy from NewPolicy: the run, the key and the
	// attribution to inject.
	Policy *proxypolicy.Policy
	// Upstream is the LiteLLM base URL, scheme://host[:port] and nothing else: no user
	// info, path, query or fragment. host is an IP address or a DNS name.
	Upstream string
	// UpstreamCAFile is a PEM bundle, as seen by nginx, used to verify an https
	// upstream. It is required for https: nginx does not verify upstream certificates
	// unless told to, and an unverified connection could hand the key to anyone.
	UpstreamCAFile string
	// SocketPath is the unix socket nginx listens on (default DefaultSocketPath).
	// nginx makes it mode 0666 so that the sandbox user can connect; a stale socket
	// file at this path makes nginx fail to start, so remove it first.
	SocketPath string
	// AuditLogPath is the JSON-lines audit log (default DefaultAuditLogPath); read it
	// back with ReadAudit. It may be a named pipe whose reader is already open: nginx
	// then blocks on a full pipe rather than lose a record.
	AuditLogPath string
	// RuntimeDir holds the pid file and nginx's temporary directories (default
	// DefaultRuntimeDir). It must exist; nginx creates the directories inside it.
	RuntimeDir string
	// ReadTimeout is the idle limit while reading from or writing to the upstream and
	// the client (default DefaultReadTimeout). It is not a limit on a whole call.
	ReadTimeout time.Duration
	// ConnectTimeout bounds connecting to the upstream (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes); larger ones get
	// HTTP 413 and an audit record with Blocked "request_too_large".
	MaxBodyBytes int64
	// NJSModule is nginx's JavaScript module, as seen by nginx (default
	// DefaultNJSModule); the response header filter needs it.
	NJSModule string
	// ScriptPath is where the caller writes NginxScript, as seen by nginx (default
	// DefaultScriptPath).
	ScriptPath string
}

// forwardedHeader is a client header re-added after proxy_pass_request_headers off.
type forwardedHeader struct{ Name, Var string }

// forwarded is the allowlist of client request headers the nginx proxy forwards.
//
// Why these: Content-Type and Accept carry the API's content negotiation (the
// Content-Type goes upstream as the Go fronts send it: application/json on a route
// with a body, its parameters dropped, and none on a route without one; a body of
// another type is refused); User-Agent helps debugging upstream; OpenAI-Beta,
// Anthropic-Version and Anthropic-Beta select API versions and features of the
// OpenAI and Anthropic APIs that LiteLLM serves. Left out on purpose:
// Accept-Encoding (a compressed stream can be held back by the compressor, and the
// hop to LiteLLM is local), Connection and Upgrade (no protocol switch past the
// proxy; a request with Upgrade is refused, as the Go fronts refuse it), OpenAI-Organization and OpenAI-Project (they pick whose account pays),
// traceparent (tracing is attribution the proxy owns), and x-pass-* and the other x-*
// headers (LiteLLM forwards those to providers, so they could carry credentials).
var forwarded = []forwardedHeader{
	{"Content-Type", "llmproxy_content_type"},
	{"Accept", "http_accept"},
	{"User-Agent", "http_user_agent"},
	{"OpenAI-Beta", "http_openai_beta"},
	{"Anthropic-Version", "http_anthropic_version"},
	{"Anthropic-Beta", "http_anthropic_beta"},
}

// passedResponseHeaders are LiteLLM's response headers the sandbox may see; they carry
// the call id, cost and deployment of each call.
var passedResponseHeaders = []string{"X-Litellm-Call-Id", "X-Litellm-Response-Cost", "X-Litellm-Model-Id"}

// hiddenResponseHeaders are upstream response headers nginx also withholds by name:
// a second wall behind the njs filter (NginxScript), which keeps only
// proxypolicy.ResponseHeaders as the Go fronts do. They are what LiteLLM and the
// providers it relays are known to send: LiteLLM's headers about the key and the
// deployment, the shared key's rate limits (x-ratelimit-*: every tenant's use),
// and the provider headers LiteLLM relays as llm_provider-* (organisation,
// account limits).
var hiddenResponseHeaders = []string{
	"X-Litellm-Key-Spend", "X-Litellm-Key-Max-Budget", "X-Litellm-Key-Tpm-Limit", "X-Litellm-Key-Rpm-Limit",
	"X-Litellm-Model-Api-Base", "X-Litellm-Model-Region", "X-Litellm-Version", "X-Litellm-Cache-Key",
	"X-Litellm-Response-Duration-Ms", "X-Litellm-Overhead-Duration-Ms", "X-Litellm-Callback-Duration-Ms",
	"X-Litellm-Attempted-Retries", "X-Litellm-Attempted-Fallbacks", "X-Litellm-Applied-Guardrails",
	"X-Litellm-Response-Cost-Original", "X-Litellm-Response-Cost-Discount-Amount", "X-Litellm-Timeout",
	"X-Litellm-Semantic-Similarity", "X-Litellm-Key-Remaining-Requests", "X-Litellm-Key-Remaining-Tokens",
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Requests",
	"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
	"Llm_provider-Openai-Organization", "Llm_provider-Openai-Processing-Ms", "Llm_provider-Openai-Version",
	"Llm_provider-Openai-Project", "Llm_provider-X-Request-Id", "Llm_provider-Request-Id",
	"Llm_provider-X-Ratelimit-Limit-Requests", "Llm_provider-X-Ratelimit-Limit-Tokens",
	"Llm_provider-X-Ratelimit-Remaining-Requests", "Llm_provider-X-Ratelimit-Remaining-Tokens",
	"Llm_provider-X-Ratelimit-Reset-Requests", "Llm_provider-X-Ratelimit-Reset-Tokens",
	"Llm_provider-Anthropic-Organization-Id",
	"Llm_provider-Anthropic-Ratelimit-Requests-Limit", "Llm_provider-Anthropic-Ratelimit-Requests-Remaining",
	"Llm_provider-Anthropic-Ratelimit-Requests-Reset", "Llm_provider-Anthropic-Ratelimit-Tokens-Limit",
	"Llm_provider-Anthropic-Ratelimit-Tokens-Remaining", "Llm_provider-Anthropic-Ratelimit-Tokens-Reset",
	"Llm_provider-Anthropic-Ratelimit-Input-Tokens-Limit", "Llm_provider-Anthropic-Ratelimit-Input-Tokens-Remaining",
	"Llm_provider-Anthropic-Ratelimit-Input-Tokens-Reset", "Llm_provider-Anthropic-Ratelimit-Output-Tokens-Limit",
	"Llm_provider-Anthropic-Ratelimit-Output-Tokens-Remaining", "Llm_provider-Anthropic-Ratelimit-Output-Tokens-Reset",
	"Llm_provider-Retry-After", "Llm_provider-Set-Cookie", "Llm_provider-Cf-Ray", "Llm_provider-Server",
	"Anthropic-Organization-Id", "Openai-Organization", "Openai-Project", "Set-Cookie", "Link",
}

func init() {
	// The allowlist and the strip list must never overlap; a change that breaks this
	// must fail loudly at start-up rather than forward a credential.
	for _, h := range hiddenResponseHeaders {
		if proxypolicy.IsResponseHeaderAllowed(h) || !hiddenNameRe.MatchString(h) {
			panic("nginxconf: bad hidden response header " + h)
		}
	}
	for _, h := range forwarded {
		v := "http_" + strings.ReplaceAll(strings.ToLower(h.Name), "-", "_")
		if h.Name == "Content-Type" {
			v = "llmproxy_content_type" // rewritten, never the client's value
		}
		if proxypolicy.IsStripped(h.Name) || v != h.Var {
			panic("nginxconf: bad forwarded header " + h.Name)
		}
	}
}

// HiddenResponseHeaders lists the upstream response headers the nginx proxy also
// withholds by name, behind its allowlist filter (NginxScript).
func HiddenResponseHeaders() []string { return slices.Clone(hiddenResponseHeaders) }

// ForwardedRequestHeaders lists the client request headers the nginx proxy forwards
// upstream. Every other client header is dropped, and none of these is one proxypolicy.IsStripped
// names.
func ForwardedRequestHeaders() []string {
	names := make([]string, len(forwarded))
	for i, h := range forwarded {
		names[i] = h.Name
	}
	return names
}

// NginxArgs is the nginx command line (without the program name) that runs confPath in
// the foreground with errors on stderr. The configuration itself does not say
// "daemon off" because images commonly pass it with -g already, and nginx refuses a
// directive given twice.
func NginxArgs(confPath string) []string {
	return []string{"-e", "stderr", "-c", confPath, "-g", "daemon off;"}
}

//go:embed templates/*.tmpl
var templateFS embed.FS

var nginxTemplate = template.Must(template.New("nginx.conf.tmpl").Funcs(template.FuncMap{
	"q":     quoteValue,
	"lit":   quoteLiteral,
	"ident": ident,
}).ParseFS(templateFS, "templates/nginx.conf.tmpl"))

// nginxData is what the template sees: every field validated.
type nginxData struct {
	RunID          string
	Attempt        int
	NJSModule      string
	Script         string
	PIDFile        string
	Temp           struct{ ClientBody, Proxy, FastCGI, UWSGI, SCGI string }
	AuditLog       string
	Listen         string
	MaxBodyBytes   int64
	ReadTimeout    string
	ConnectTimeout string
	Scheme         string
	UpstreamServer string // host:port, IPv6 in brackets
	UpstreamHost   string // the Host header: host[:port] as the caller wrote it
	UpstreamName   string // the TLS name: the host without brackets
	TLS            bool
	CAFile         string
	Forwarded      []forwardedHeader
	Injected       []proxypolicy.Header
	PassHeaders    []string
	HiddenHeaders  []string
	HealthBody     string
	Routes         []nginxRoute
}

// nginxRoute is one entry of proxypolicy.Routes as nginx locations: the /v1 path, the
// bare form OpenAI SDKs send without /v1, and the method pattern.
type nginxRoute struct {
	Path, Bare, Methods string
	Sub                 bool
	// Body marks a route that takes a JSON body (BodyKeys): its Content-Type is checked.
	Body bool
}

// routePathRe keeps route paths to what may be written into a location unquoted.
var routePathRe = regexp.MustCompile(`^/[a-z0-9_/]+$`)

// nginxRoutes renders the route allowlist the Go fronts use.
func nginxRoutes() ([]nginxRoute, error) {
	var out []nginxRoute
	for _, r := range proxypolicy.Routes() {
		if !routePathRe.MatchString(r.Path) || !strings.HasPrefix(r.Path, proxypolicy.BareRoutePrefix+"/") {
			return nil, port.Invalidf("nginx config: route path %q", r.Path)
		}
		m := r.Method
		if m == http.MethodGet {
			m = "GET|HEAD"
		}
		out = append(out, nginxRoute{Path: r.Path, Bare: strings.TrimPrefix(r.Path, proxypolicy.BareRoutePrefix), Methods: m, Sub: r.SubPaths, Body: r.BodyKeys != nil})
	}
	return out, nil
}

// RenderNginx renders the nginx configuration of one per-run proxy. It does no I/O.
// Errors wrap port.ErrInvalidSpec and name the offending field. Run the result with
// NginxArgs, with NginxScript written at ScriptPath; it needs nginx's core, proxy,
// rewrite, map and geo modules and the njs module (NJSModule).
//
// # What is served
//
// The proxy listens on SocketPath only. GET /health is answered by nginx with
// {"status":"ok","run_id":"..."} and not audited. /v1/... and the bare OpenAI paths
// SDKs use when their base URL lacks /v1 (/chat/completions, /completions,
// /embeddings, /models, /moderations, /responses and below) go to the upstream as
// /v1/..., with GET, HEAD, POST and DELETE only (else 405). Paths are normalized by
// nginx first and the normalized path is what the upstream sees, so dot segments
// cannot reach LiteLLM's admin API. Everything else is a JSON 404. Responses are
// streamed unbuffered, upstream errors pass through, a failed upstream gives a JSON
// 502 or 504, and nothing is retried (a retried call would be billed twice). Every
// forwarded call gets one audit line. Refused requests get one with a Blocked reason
// while the connection number and the request's number on it are small (at most 891
// such lines), and a short tally line after that, so that a flood of refused requests
// writes about 30 bytes each; /health is not audited. ReadAudit reads both kinds.
//
// # Header handling: an allowlist
//
// The proxy must strip every client Authorization and x-litellm-* header (see
// proxypolicy.IsStripped). Stock nginx cannot remove request headers by prefix (that needs Lua), and
// naming known x-litellm-* headers one by one would let the next header LiteLLM adds
// through. So the configuration fails closed: proxy_pass_request_headers is off, the few
// client headers ForwardedRequestHeaders lists are re-added by name, and the three
// headers of Policy.Injected are set. Anything else a client sends never leaves nginx.
// Responses pass the njs filter of NginxScript: only proxypolicy.ResponseHeaders
// reach the sandbox, and an informational answer (1xx) cuts the call.
//
// # Values
//
// Every substituted value is validated (by proxypolicy.NewPolicy, and here for paths and the
// upstream) and written as an nginx double-quoted string with backslash and quote
// escaped, so ';', '{', '}', '#' and whitespace stay inside one argument. nginx has no
// escape for '$' in values that may hold variables, so a '$' in a header value is
// written as ${llmproxy_dollar}, a variable whose value is a literal "$". Paths admit
// only [A-Za-z0-9._/-].
//
// # What nginx cannot do
//
// Stock nginx cannot count calls per run, so it cannot enforce port.Budget; the Docker
// nginx adapter refuses a spec with a Budget with port.ErrUnsupported (the in-process
// proxy enforces it). It cannot read request bodies either, so an audit record's Model
// is LiteLLM's x-litellm-model-group response header when present, and TTFB is the time
// to the upstream's response header, not to its first streamed chunk; RequestID (the
// response body's id) stays empty, so reconciliation matches on CallID.
func RenderNginx(cfg NginxConfig) ([]byte, error) {
	d, err := cfg.data()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := nginxTemplate.Execute(&buf, d); err != nil {
		// Only a value that escaped validation gets here; refuse it all the same.
		return nil, port.Invalidf("nginx config: %v", err)
	}
	return buf.Bytes(), nil
}

func (cfg NginxConfig) data() (*nginxData, error) {
	p := cfg.Policy
	if p == nil || p.RunID() == "" || len(p.Injected()) == 0 {
		return nil, port.Invalidf("nginx config: a policy from proxypolicy.NewPolicy is required")
	}
	if err := port.ValidateRunID(p.RunID()); err != nil {
		return nil, err
	}
	d := &nginxData{
		RunID:         p.RunID(),
		Forwarded:     forwarded,
		Injected:      p.Injected(),
		PassHeaders:   passedResponseHeaders,
		HiddenHeaders: hiddenResponseHeaders,
	}
	for _, h := range d.Injected {
		if !headerNameRe.MatchString(h.Name) {
			return nil, port.Invalidf("nginx config: header name %q", h.Name)
		}
		if h.Name == proxypolicy.HeaderSpendLogsMetadata {
			var md proxypolicy.SpendLogsMetadata
			if err := json.Unmarshal([]byte(h.Value), &md); err != nil {
				return nil, port.Invalidf("nginx config: spend logs metadata: %v", err)
			}
			d.Attempt = md.Attempt
		}
	}
	health, err := json.Marshal(struct {
		Status string `json:"status"`
		RunID  string `json:"run_id"`
	}{"ok", p.RunID()})
	if err != nil {
		return nil, port.Invalidf("nginx config: health body: %v", err)
	}
	d.HealthBody = string(health) + "\n"
	if d.Routes, err = nginxRoutes(); err != nil {
		return nil, err
	}

	var paths = []struct {
		field string
		v     *string
		def   string
	}{
		{"socket path", &cfg.SocketPath, DefaultSocketPath},
		{"audit log path", &cfg.AuditLogPath, DefaultAuditLogPath},
		{"runtime dir", &cfg.RuntimeDir, DefaultRuntimeDir},
		{"njs module", &cfg.NJSModule, DefaultNJSModule},
		{"script path", &cfg.ScriptPath, DefaultScriptPath},
	}
	for _, f := range paths {
		if *f.v == "" {
			*f.v = f.def
		}
		if err := validatePath(f.field, *f.v); err != nil {
			return nil, err
		}
	}
	d.Listen = "unix:" + cfg.SocketPath
	d.AuditLog = cfg.AuditLogPath
	d.NJSModule, d.Script = cfg.NJSModule, cfg.ScriptPath
	rd := cfg.RuntimeDir
	d.PIDFile = path.Join(rd, "nginx.pid")
	d.Temp.ClientBody = path.Join(rd, "nginx-client-body")
	d.Temp.Proxy = path.Join(rd, "nginx-proxy")
	d.Temp.FastCGI = path.Join(rd, "nginx-fastcgi")
	d.Temp.UWSGI = path.Join(rd, "nginx-uwsgi")
	d.Temp.SCGI = path.Join(rd, "nginx-scgi")

	if d.ReadTimeout, err = duration("read timeout", cfg.ReadTimeout, DefaultReadTimeout); err != nil {
		return nil, err
	}
	if d.ConnectTimeout, err = duration("connect timeout", cfg.ConnectTimeout, DefaultConnectTimeout); err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxBodyBytes == 0:
		d.MaxBodyBytes = DefaultMaxBodyBytes
	case cfg.MaxBodyBytes < 0:
		return nil, port.Invalidf("nginx config: max body bytes %d is negative", cfg.MaxBodyBytes)
	default:
		d.MaxBodyBytes = cfg.MaxBodyBytes
	}

	if err := d.setUpstream(cfg.Upstream); err != nil {
		return nil, err
	}
	if d.TLS {
		if cfg.UpstreamCAFile == "" {
			return nil, port.Invalidf("nginx config: an https upstream needs UpstreamCAFile to verify its certificate")
		}
		if err := validatePath("upstream CA file", cfg.UpstreamCAFile); err != nil {
			return nil, err
		}
		d.CAFile = cfg.UpstreamCAFile
	} else if cfg.UpstreamCAFile != "" {
		return nil, port.Invalidf("nginx config: UpstreamCAFile is set but the upstream %q is not https", cfg.Upstream)
	}
	return d, nil
}

var (
	headerNameRe = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	// hiddenNameRe admits the underscore of LiteLLM's llm_provider- prefix.
	hiddenNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	safePathRe   = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
	dnsLabelRe   = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$`)
	identRe      = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// validatePath accepts clean absolute paths of [A-Za-z0-9._/-]: nothing nginx could
// read as a variable, a quote or a directive boundary.
func validatePath(field, p string) error {
	if len(p) > 1024 || !safePathRe.MatchString(p) || path.Clean(p) != p || p == "/" {
		return port.Invalidf("nginx config: %s %q is not a clean absolute path of [A-Za-z0-9._/-]", field, p)
	}
	return nil
}

func duration(field string, d, def time.Duration) (string, error) {
	switch {
	case d == 0:
		d = def
	case d < time.Millisecond:
		return "", port.Invalidf("nginx config: %s %v is under a millisecond", field, d)
	case d > 7*24*time.Hour:
		return "", port.Invalidf("nginx config: %s %v is over a week", field, d)
	}
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s", nil
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms", nil
}

// setUpstream validates the upstream URL and fills the upstream fields.
func (d *nginxData) setUpstream(raw string) error {
	bad := func(why string) error {
		return port.Invalidf("nginx config: upstream %q: %s (want scheme://host[:port])", raw, why)
	}
	if raw == "" {
		return bad("empty")
	}
	if len(raw) > 512 || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return bad("too long or has whitespace, control or non-ASCII characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad(err.Error())
	}
	switch u.Scheme {
	case "http":
	case "https":
		d.TLS = true
	default:
		return bad("scheme must be http or https")
	}
	switch {
	case u.Opaque != "":
		return bad("not a hierarchical URL")
	case u.User != nil:
		return bad("user info is not allowed; the key comes from the spec")
	case u.Path != "" && u.Path != "/", u.RawPath != "":
		return bad("a path is not allowed")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("a query is not allowed")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("a fragment is not allowed")
	}
	host, portStr := u.Hostname(), u.Port()
	if host == "" {
		return bad("no host")
	}
	if portStr == "" && strings.HasSuffix(u.Host, ":") {
		return bad("empty port")
	}
	if portStr != "" {
		n, err := strconv.Atoi(portStr)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != portStr {
			return bad("port must be a number from 1 to 65535")
		}
	} else if d.TLS {
		portStr = "443"
	} else {
		portStr = "80"
	}
	server := host + ":" + portStr
	if strings.Contains(u.Host, "[") || strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("bracketed host is not an IPv6 address without zone")
		}
		server = "[" + host + "]:" + portStr
	} else if _, err := netip.ParseAddr(host); err != nil {
		if !validDNSName(host) {
			return bad("host is neither an IP address nor a DNS name")
		}
	}
	d.Scheme = u.Scheme
	d.UpstreamServer = server
	d.UpstreamHost = u.Host
	d.UpstreamName = host
	return nil
}

func validDNSName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if !dnsLabelRe.MatchString(l) {
			return false
		}
	}
	return true
}

// quoteValue writes v as an nginx double-quoted string for a directive whose value may
// hold variables (proxy_set_header, return). Backslash and double quote are escaped; a
// '$' becomes ${llmproxy_dollar} (see the template), so no text of v can name a
// variable. Tab, CR and LF use nginx's escapes; other control bytes, and a result
// longer than nginx accepts, are refused.
func quoteValue(v string) (string, error) {
	var b strings.Builder
	b.Grow(len(v) + 2)
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '$':
			b.WriteString("${llmproxy_dollar}")
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("value has control byte 0x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	if b.Len() > maxNginxParam {
		return "", fmt.Errorf("value is %d bytes once quoted for nginx, over its limit of %d", b.Len(), maxNginxParam)
	}
	return b.String(), nil
}

// maxNginxParam bounds one quoted argument: nginx reads its configuration through a
// 4096-byte buffer and refuses ("too long parameter") a word that fills it.
const maxNginxParam = 4000

// quoteLiteral quotes a path or address for a directive that takes it literally. Such
// values are validated to a character set that needs no escaping; anything else is
// refused rather than escaped, because some of these directives (access_log) would
// read a '$' as a variable and have no '$' escape.
func quoteLiteral(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._/-:[]", c) >= 0) {
			return "", fmt.Errorf("literal %q has a byte 0x%02x outside [A-Za-z0-9._/:[]-]", v, c)
		}
	}
	return `"` + v + `"`, nil
}

// ident passes a validated run id into comments and the log format unquoted.
func ident(v string) (string, error) {
	if !identRe.MatchString(v) {
		return "", fmt.Errorf("identifier %q has characters outside [A-Za-z0-9_.-]", v)
	}
	return v, nil
}
