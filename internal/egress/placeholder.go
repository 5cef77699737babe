package egress

import (
	"context"
	"errors"
	"slices"
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
		if port.ValidEgressName(name) {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
			i = start + k + 2
		} else {
			i = start - 1
		}
	}
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
		if !ok || !port.ValidEgressName(name) {
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

func hexVal(d []byte) (int, bool) {
	v := 0
	for _, c := range d {
		switch {
		case c >= '0' && c <= '9':
			v = v*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v*16 + int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v*16 + int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func hexPrefix(d []byte) bool {
	_, ok := hexVal(d)
	return ok
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}
