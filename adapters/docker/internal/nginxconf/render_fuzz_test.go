package nginxconf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// directive is one parsed nginx directive; Block is non-nil for "name args { ... }".
type directive struct {
	Name  string
	Args  []string
	Block []*directive
}

// parseNginx tokenizes an nginx configuration the way nginx's ngx_conf_read_token does:
// whitespace separates words, ';' ends a directive, '{' and '}' open and close blocks,
// '#' at the start of a word starts a comment, quotes group a word (with \" \' \\ \t \r
// \n escapes decoded), and "${" inside a bare word is a variable, not a block. Quoted
// words are returned decoded, so a test sees exactly the argument nginx would.
func parseNginx(src string) ([]*directive, error) {
	p := &nginxParser{src: src}
	ds, err := p.block(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) {
		return nil, fmt.Errorf("unexpected '}' at offset %d", p.pos)
	}
	return ds, nil
}

type nginxParser struct {
	src string
	pos int
}

func (p *nginxParser) block(depth int) ([]*directive, error) {
	var (
		out   []*directive
		words []string
	)
	for {
		tok, kind, err := p.next()
		if err != nil {
			return nil, err
		}
		switch kind {
		case tokEOF:
			if len(words) > 0 {
				return nil, errors.New("unexpected end of file: directive without ';'")
			}
			if depth > 0 {
				return nil, errors.New("unexpected end of file: missing '}'")
			}
			return out, nil
		case tokWord:
			words = append(words, tok)
		case tokSemicolon:
			if len(words) == 0 {
				return nil, fmt.Errorf("unexpected ';' at offset %d", p.pos)
			}
			out = append(out, &directive{Name: words[0], Args: words[1:]})
			words = nil
		case tokOpen:
			if len(words) == 0 {
				return nil, fmt.Errorf("unexpected '{' at offset %d", p.pos)
			}
			inner, err := p.block(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, &directive{Name: words[0], Args: words[1:], Block: append([]*directive{}, inner...)})
			words = nil
		case tokClose:
			if len(words) > 0 {
				return nil, fmt.Errorf("unexpected '}' at offset %d", p.pos)
			}
			if depth == 0 {
				p.pos--
				return out, nil
			}
			return out, nil
		}
	}
}

const (
	tokEOF = iota
	tokWord
	tokSemicolon
	tokOpen
	tokClose
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func (p *nginxParser) next() (string, int, error) {
	for p.pos < len(p.src) && isSpace(p.src[p.pos]) {
		p.pos++
	}
	if p.pos >= len(p.src) {
		return "", tokEOF, nil
	}
	switch c := p.src[p.pos]; c {
	case ';':
		p.pos++
		return "", tokSemicolon, nil
	case '{':
		p.pos++
		return "", tokOpen, nil
	case '}':
		p.pos++
		return "", tokClose, nil
	case '#':
		for p.pos < len(p.src) && p.src[p.pos] != '\n' {
			p.pos++
		}
		return p.next()
	case '"', '\'':
		p.pos++
		var b strings.Builder
		for {
			if p.pos >= len(p.src) {
				return "", 0, errors.New("unterminated quoted string")
			}
			ch := p.src[p.pos]
			p.pos++
			if ch == c {
				break
			}
			if ch == '\\' && p.pos < len(p.src) {
				switch e := p.src[p.pos]; e {
				case '"', '\'', '\\':
					b.WriteByte(e)
					p.pos++
					continue
				case 't':
					b.WriteByte('\t')
					p.pos++
					continue
				case 'r':
					b.WriteByte('\r')
					p.pos++
					continue
				case 'n':
					b.WriteByte('\n')
					p.pos++
					continue
				}
			}
			b.WriteByte(ch)
		}
		// nginx wants a separator after a closing quote.
		if p.pos < len(p.src) && !isSpace(p.src[p.pos]) && p.src[p.pos] != ';' && p.src[p.pos] != '{' {
			return "", 0, fmt.Errorf("unexpected %q after quoted string at offset %d", p.src[p.pos], p.pos)
		}
		return b.String(), tokWord, nil
	default:
		start := p.pos
		variable := false
		for p.pos < len(p.src) {
			ch := p.src[p.pos]
			if ch == '\\' && p.pos+1 < len(p.src) {
				p.pos += 2
				continue
			}
			if ch == '{' && variable {
				p.pos++
				continue
			}
			variable = ch == '$'
			if isSpace(ch) || ch == ';' || ch == '{' || ch == '}' {
				break
			}
			if ch == '"' || ch == '\'' {
				return "", 0, fmt.Errorf("quote inside a bare word at offset %d", p.pos)
			}
			p.pos++
		}
		return p.src[start:p.pos], tokWord, nil
	}
}

// shape is the directive structure of a parsed configuration: names, argument counts and
// blocks, without argument values.
func shape(ds []*directive) string {
	var b strings.Builder
	var walk func([]*directive, int)
	walk = func(ds []*directive, depth int) {
		for _, d := range ds {
			fmt.Fprintf(&b, "%s%s/%d", strings.Repeat("  ", depth), d.Name, len(d.Args))
			if d.Block != nil {
				b.WriteString(" {\n")
				walk(d.Block, depth+1)
				fmt.Fprintf(&b, "%s}", strings.Repeat("  ", depth))
			}
			b.WriteByte('\n')
		}
	}
	walk(ds, 0)
	return b.String()
}

// find returns the directives named name (at any depth) whose first argument is first
// (any first argument when first is "").
func find(ds []*directive, name, first string) []*directive {
	var out []*directive
	for _, d := range ds {
		if d.Name == name && (first == "" || len(d.Args) > 0 && d.Args[0] == first) {
			out = append(out, d)
		}
		out = append(out, find(d.Block, name, first)...)
	}
	return out
}

// undollar turns an argument written by quoteValue back into the value nginx sends:
// ${llmproxy_dollar} is the only variable reference it may contain.
func undollar(t testing.TB, arg string) string {
	t.Helper()
	rest := strings.ReplaceAll(arg, "${llmproxy_dollar}", "")
	require.NotContains(t, rest, "$", "argument %q has a '$' that nginx would read as a variable", arg)
	return strings.ReplaceAll(arg, "${llmproxy_dollar}", "$")
}

type fuzzInput struct {
	runID, key, account, user, graph, trace, session string
	attempt                                          int
}

func (in fuzzInput) spec() port.ProxySpec {
	return port.ProxySpec{
		RunID: in.runID, Attempt: in.attempt, APIKey: in.key, Upstream: "http://127.0.0.1:4000",
		Attribution: port.Attribution{
			BillingAccountID: in.account, UserID: in.user, GraphID: in.graph,
			ExistingTraceID: in.trace, SessionID: in.session, TraceUserID: in.user,
		},
	}
}

// fuzzSeeds are hostile but (mostly) valid inputs; TestFuzzSeedsPassNginxT feeds the
// valid ones to nginx -t.
var fuzzSeeds = []fuzzInput{
	{"run-1", "sk-1", "acct-1", "u1", "sandbox:agent", "", "", 0},
	{"r", "k", "a;}", "u{", "g#c", "t\"", "s\\", 7},
	{"run.2_x", "sk+/=~-.", `$host`, `${remote_addr}`, `$1$`, `\$x`, `$`, 3},
	{"x", "k", `";} server { listen 80; } #`, `'; return 200 pwned; '`, `\";\n`, `\\n\r\t`, "${llmproxy_dollar}", 1},
	{"x", "k", "a", "} } } {", "include /etc/passwd;", "# }", `"'"'`, 1_000_000},
	{"x", "k", "acct", strings.Repeat("$", 80), strings.Repeat(`\"`, 40), strings.Repeat("{", 200), "", 0},
	// Valid attribution, but too long for one nginx parameter once '$' is spelled out.
	{"x", "k", "acct", strings.Repeat("$", 256), strings.Repeat(`\"`, 128), strings.Repeat("{", 256), "", 0},
	{"run\nid", "k", "a", "", "", "", "", 0},
	{"r", "k\"", "a", "", "", "", "", 0},
	{"r", "k", "a\x00b", "", "", "", "", 0},
	{"r", "k", "", "", "", "", "", 0},
	{"r", "k", "a", "é", "", "", "", 0},
	{"r", "k", "a", "", "", "", "", -1},
}

// checkRender renders in and checks the fuzz properties; it returns the config, or nil
// when the input was rightly refused.
func checkRender(t *testing.T, in fuzzInput, ref string) []byte {
	t.Helper()
	spec := in.spec()
	pol, err := proxypolicy.NewPolicy(spec)
	if err != nil {
		require.ErrorIs(t, err, port.ErrInvalidSpec)
		return nil
	}
	conf, err := RenderNginx(NginxConfig{Policy: pol, Upstream: spec.Upstream})
	if err != nil {
		require.ErrorIs(t, err, port.ErrInvalidSpec)
		return nil
	}
	ds, err := parseNginx(string(conf))
	require.NoError(t, err, "rendered config does not tokenize:\n%s", conf)
	require.Equal(t, ref, shape(ds), "an input changed the directive structure:\n%s", conf)

	// Every injected header arrives with exactly the policy's value.
	for _, h := range pol.Injected() {
		got := find(ds, "proxy_set_header", h.Name)
		require.Len(t, got, 1, h.Name)
		assert.Equal(t, h.Value, undollar(t, got[0].Args[1]), h.Name)
	}
	// Nothing else is set, and the forwarded headers are the allowlist.
	var names []string
	for _, d := range find(ds, "proxy_set_header", "") {
		names = append(names, d.Args[0])
	}
	want := []string{"Host", "Connection"}
	want = append(want, ForwardedRequestHeaders()...)
	want = append(want, proxypolicy.HeaderAuthorization, proxypolicy.HeaderEndUserID, proxypolicy.HeaderSpendLogsMetadata)
	assert.Equal(t, want, names)
	health := find(ds, "return", "200")
	require.Len(t, health, 1)
	assert.Equal(t, `{"status":"ok","run_id":"`+in.runID+`"}`+"\n", undollar(t, health[0].Args[1]))
	return conf
}

func referenceShape(t testing.TB) string {
	t.Helper()
	pol, err := proxypolicy.NewPolicy(fuzzSeeds[0].spec())
	require.NoError(t, err)
	conf, err := RenderNginx(NginxConfig{Policy: pol, Upstream: "http://127.0.0.1:4000"})
	require.NoError(t, err)
	ds, err := parseNginx(string(conf))
	require.NoError(t, err)
	return shape(ds)
}

func FuzzRenderNginx(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s.runID, s.key, s.account, s.user, s.graph, s.trace, s.session, s.attempt)
	}
	ref := referenceShape(f)
	f.Fuzz(func(t *testing.T, runID, key, account, user, graph, trace, session string, attempt int) {
		checkRender(t, fuzzInput{runID, key, account, user, graph, trace, session, attempt}, ref)
	})
}

// TestFuzzSeedsPassNginxT proves with nginx itself that hostile values render to a
// configuration nginx accepts (and the fuzz test proves it has the reference structure).
func TestFuzzSeedsPassNginxT(t *testing.T) {
	nginx := testenv.NeedCommand(t, "nginx", "nginx")
	ref := referenceShape(t)
	valid := 0
	for i, s := range fuzzSeeds {
		conf := checkRender(t, s, ref)
		if conf == nil {
			continue
		}
		valid++
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			nginxTest(t, nginx, s.spec())
		})
	}
	assert.Equal(t, 6, valid, "the seeds meant to be valid")
}

// nginxTest renders spec with every path in a temporary directory and runs nginx -t.
func nginxTest(t *testing.T, nginx string, spec port.ProxySpec) {
	t.Helper()
	pol, err := proxypolicy.NewPolicy(spec)
	require.NoError(t, err)
	dir := t.TempDir()
	conf, err := RenderNginx(NginxConfig{
		Policy: pol, Upstream: spec.Upstream,
		SocketPath: filepath.Join(dir, "llm.sock"), AuditLogPath: filepath.Join(dir, "audit.log"), RuntimeDir: dir,
		ScriptPath: filepath.Join(dir, "llmproxy.js"),
	})
	require.NoError(t, err)
	runNginxT(t, nginx, dir, conf)
}

func runNginxT(t *testing.T, nginx, dir string, conf []byte) {
	t.Helper()
	file := filepath.Join(dir, "nginx.conf")
	require.NoError(t, os.WriteFile(file, conf, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "llmproxy.js"), NginxScript(), 0o644))
	out, err := exec.Command(nginx, "-t", "-p", dir, "-e", "stderr", "-c", file).CombinedOutput()
	require.NoError(t, err, "nginx -t refused:\n%s\n--- config ---\n%s", out, conf)
	assert.Contains(t, string(out), "test is successful")
}
