package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// MaxPlaceholders bounds the placeholders of one request.
const MaxPlaceholders = 32

// Placeholders returns the names of the {{name}} placeholders in s, in order of first
// appearance. A name is 1-64 of [A-Za-z0-9_.-]; other text between braces is left as
// is.
func Placeholders(s string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(s[i:], "{{")
		if j < 0 {
			return out
		}
		start := i + j + 2
		k := strings.Index(s[start:], "}}")
		if k < 0 {
			return out
		}
		name := s[start : start+k]
		if validName(name) {
			if !contains(out, name) {
				out = append(out, name)
			}
			i = start + k + 2
		} else {
			i = start - 1
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Substitute replaces every {{name}} of s whose name is in vals by esc(value).
func Substitute(s string, vals map[string]string, esc func(string) string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	var b strings.Builder
	for i := 0; ; {
		j := strings.Index(s[i:], "{{")
		if j < 0 {
			b.WriteString(s[i:])
			return b.String()
		}
		start := i + j + 2
		k := strings.Index(s[start:], "}}")
		if k < 0 {
			b.WriteString(s[i:])
			return b.String()
		}
		name := s[start : start+k]
		v, ok := vals[name]
		if !ok || !validName(name) {
			b.WriteString(s[i : start-1])
			i = start - 1
			continue
		}
		b.WriteString(s[i : i+j])
		if esc != nil {
			v = esc(v)
		}
		b.WriteString(v)
		i = start + k + 2
	}
}

// errUnresolved carries the placeholder the agent gets told about; never a value.
var errUnresolved = errors.New("unresolved placeholder")

// resolve fetches the values of names for pr, refusing names the provider does not
// list and values that could inject headers.
func resolve(ctx context.Context, src port.CredentialSource, runID string, pr *provider, names []string, target string) (map[string]string, *port.EgressDenial) {
	if len(names) > MaxPlaceholders {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardPlaceholder, Target: target, Message: "too many placeholders"}
	}
	vals := make(map[string]string, len(names))
	for _, n := range names {
		if !pr.creds[n] || src == nil {
			return nil, &port.EgressDenial{Status: 400, Guard: port.GuardPlaceholder, Target: target, Message: "unresolved placeholder {{" + n + "}}: the provider has no such credential"}
		}
		v, err := src.Credential(ctx, runID, pr.id, n)
		if err != nil || v == "" {
			return nil, &port.EgressDenial{Status: 400, Guard: port.GuardPlaceholder, Target: target, Message: "unresolved placeholder {{" + n + "}}"}
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, &port.EgressDenial{Status: 400, Guard: port.GuardPlaceholder, Target: target, Message: "placeholder {{" + n + "}} refused: its value contains CR, LF or NUL"}
		}
		vals[n] = v
	}
	return vals, nil
}

// Redactor replaces secret values by their placeholders in a stream, also when a
// value is split across writes: it holds back only the longest tail that could
// still start a value, so a stream without secrets flows unchanged and unbuffered.
type Redactor struct {
	secrets [][]byte
	repls   [][]byte
	pending []byte
	// Count is the number of values replaced so far.
	Count int
}

// NewRedactor returns a Redactor for vals (name to value); nil when there is nothing
// to redact.
func NewRedactor(vals map[string]string) *Redactor {
	r := &Redactor{}
	var seen []string
	for n, v := range vals {
		if len(v) < 4 {
			continue // too short to redact without mangling ordinary text
		}
		// The value as sent, and as an upstream would echo it from a URL or in JSON.
		for _, form := range append([]string{v, url.QueryEscape(v), url.PathEscape(v)}, jsonForms(v)...) {
			if !contains(seen, form) {
				seen = append(seen, form)
				r.secrets = append(r.secrets, []byte(form))
				r.repls = append(r.repls, []byte("{{"+n+"}}"))
			}
		}
	}
	if len(r.secrets) == 0 {
		return nil
	}
	return r
}

// Feed takes the next chunk and returns what may be emitted. final flushes the held
// tail.
func (r *Redactor) Feed(p []byte, final bool) []byte {
	buf := append(r.pending, p...)
	out := make([]byte, 0, len(buf))
	i := 0
	for {
		best, bi := -1, -1
		for k, s := range r.secrets {
			j := bytes.Index(buf[i:], s)
			if j >= 0 && (best < 0 || j < best || j == best && len(s) > len(r.secrets[bi])) {
				best, bi = j, k
			}
		}
		if best < 0 {
			break
		}
		out = append(out, buf[i:i+best]...)
		out = append(out, r.repls[bi]...)
		i += best + len(r.secrets[bi])
		r.Count++
	}
	keep := 0
	if !final {
		keep = r.heldTail(buf[i:])
	}
	out = append(out, buf[i:len(buf)-keep]...)
	r.pending = append([]byte(nil), buf[len(buf)-keep:]...)
	return out
}

// heldTail is the length of the longest suffix of b that is a proper prefix of a
// secret.
func (r *Redactor) heldTail(b []byte) int {
	best := 0
	for _, s := range r.secrets {
		n := len(s) - 1
		if n > len(b) {
			n = len(b)
		}
		for l := n; l > best; l-- {
			if bytes.HasPrefix(s, b[len(b)-l:]) {
				best = l
				break
			}
		}
	}
	return best
}

// String redacts a whole string.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	t := &Redactor{secrets: r.secrets, repls: r.repls}
	out := t.Feed([]byte(s), true)
	r.Count += t.Count
	return string(out)
}

// jsonForms are v as a JSON string body, with and without HTML escaping.
func jsonForms(v string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			s := strings.TrimSuffix(b.String(), "\n")
			out = append(out, s[1:len(s)-1])
		}
	}
	return out
}
