package egress

import (
	"bytes"
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

// Redactor replaces secret values by their placeholders in a stream, also when a
// value is split across writes, and in every spelling a standard decoder turns back
// into the value: each character may appear as itself, percent-encoded (either hex
// case, "+" for a space), as a JSON or JavaScript escape (\uXXXX, \xXX, \/, \", \\),
// or as an HTML character reference (&#NN;, &#xHH;, &amp; and the other named
// references of ASCII punctuation), in any mix. It holds back only a tail that could
// still start a value, so a stream without secrets flows unchanged and unbuffered.
// Transformations that are not a per-character encoding (base64, hashing,
// compression, splitting into pieces) are not recognised here.
type Redactor struct {
	secrets []secret
	starter [256]bool // bytes that can begin a spelling of some secret
	pending []byte
	// Count is the number of values replaced so far.
	Count int
}

type secret struct {
	val, lval []byte // the value, and lower-cased (header names are folded)
	repl      []byte
	has       [256]bool // bytes of the value, a quick reject for fragments
}

// fragmentLen is the shortest piece of a secret the header check redacts: a secret
// split across two headers leaves at least one piece this long (or is shorter).
const fragmentLen = 8

// NewRedactor returns a Redactor for vals (name to value); nil when there is nothing
// to redact.
func NewRedactor(vals map[string]string) *Redactor {
	r := &Redactor{}
	for n, v := range vals {
		if len(v) < 4 {
			continue // too short to redact without mangling ordinary text
		}
		s := secret{val: []byte(v), lval: []byte(strings.ToLower(v)), repl: []byte("{{" + n + "}}")}
		for i := 0; i < len(v); i++ {
			s.has[v[i]], s.has[lower(v[i])] = true, true
		}
		r.secrets = append(r.secrets, s)
		c := v[0]
		for _, b := range []byte{c, lower(c), upper(c), '%', '\\', '&'} {
			r.starter[b] = true
		}
		if c == ' ' {
			r.starter['+'] = true
		}
	}
	if len(r.secrets) == 0 {
		return nil
	}
	// The longest value first, so a value holding another is replaced whole; the
	// order is fixed, so a stream redacts the same however it is split.
	slices.SortFunc(r.secrets, func(a, b secret) int {
		if d := len(b.val) - len(a.val); d != 0 {
			return d
		}
		return bytes.Compare(a.val, b.val)
	})
	return r
}

// Feed takes the next chunk and returns what may be emitted. final flushes the held
// tail.
func (r *Redactor) Feed(p []byte, final bool) []byte {
	return r.feed(p, final, false)
}

func (r *Redactor) feed(p []byte, final, fold bool) []byte {
	buf := append(r.pending, p...)
	r.pending = nil
	out := make([]byte, 0, len(buf))
	last := 0
	for i := 0; i < len(buf); {
		if !r.starter[buf[i]] {
			i++
			continue
		}
		matched, hold := false, false
		for k := range r.secrets {
			n, partial := matchSecret(buf[i:], r.secrets[k].val, fold)
			if partial && !final {
				hold = true
				break
			}
			if n > 0 {
				out = append(out, buf[last:i]...)
				out = append(out, r.secrets[k].repl...)
				r.Count++
				i += n
				last, matched = i, true
				break
			}
		}
		if hold {
			out = append(out, buf[last:i]...)
			r.pending = append([]byte(nil), buf[i:]...)
			return out
		}
		if !matched {
			i++
		}
	}
	return append(out, buf[last:]...)
}

// String redacts a whole string.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	t := &Redactor{secrets: r.secrets, starter: r.starter}
	out := t.feed([]byte(s), true, false)
	r.Count += t.Count
	return string(out)
}

// Header redacts a response header value: every spelling of a value, and then any
// piece of a value at least fragmentLen long (a value split across two headers).
func (r *Redactor) Header(v string) string {
	if r == nil || v == "" {
		return v
	}
	v = r.String(v)
	for k := range r.secrets {
		s := &r.secrets[k]
		if len(s.val) < fragmentLen {
			continue
		}
		var b strings.Builder
		last, found := 0, false
		for i := 0; i+fragmentLen <= len(v); {
			if !s.fragment(v[i:i+fragmentLen], false) {
				i++
				continue
			}
			j := i + fragmentLen
			for j < len(v) && s.fragment(v[j+1-fragmentLen:j+1], false) {
				j++
			}
			b.WriteString(v[last:i])
			b.Write(s.repl)
			r.Count++
			last, i, found = j, j, true
		}
		if found {
			b.WriteString(v[last:])
			v = b.String()
		}
	}
	return v
}

// fragment reports whether w (fragmentLen bytes) is a piece of the value; folded
// compares lower-cased w with the lower-cased value.
func (s *secret) fragment(w string, folded bool) bool {
	if !s.has[w[0]] || !s.has[w[len(w)-1]] {
		return false
	}
	if folded {
		return bytes.Contains(s.lval, []byte(w))
	}
	return bytes.Contains(s.val, []byte(w))
}

// Name reports whether a header name spells a value, or a piece of one, in any case
// (names are case-folded when they are parsed).
func (r *Redactor) Name(k string) bool {
	if r == nil {
		return false
	}
	lk := strings.ToLower(k)
	for i := range r.secrets {
		s := &r.secrets[i]
		if len(s.val) < fragmentLen && strings.Contains(lk, string(s.lval)) {
			r.Count++
			return true
		}
		for j := 0; j+fragmentLen <= len(lk); j++ {
			if s.fragment(lk[j:j+fragmentLen], true) {
				r.Count++
				return true
			}
		}
	}
	if strings.IndexByte(k, '%') < 0 {
		return false // '%' is the only escape a header name (a token) can hold
	}
	t := &Redactor{secrets: r.secrets, starter: r.starter}
	for _, b := range []byte(k) {
		t.starter[b] = true // folded: any letter may start a value
	}
	t.feed([]byte(k), true, true)
	r.Count += t.Count
	return t.Count > 0
}

// matchSecret matches one spelling of val at the start of b: the bytes it spans, or
// partial when b ends before it can tell.
func matchSecret(b, val []byte, fold bool) (n int, partial bool) {
	p := 0
	for _, c := range val {
		if p >= len(b) {
			return 0, true
		}
		k, part := matchChar(b[p:], c, fold)
		if part {
			return 0, true
		}
		if k == 0 {
			return 0, false
		}
		p += k
	}
	return p, false
}

// maxEntity bounds an HTML character reference ("&#x0000002f;" and the like).
const maxEntity = 12

// matchChar matches one spelling of c at the start of b (len(b) > 0). Escapes are
// tried before the literal byte, so a value holding '%', '\\' or '&' still matches
// its escaped spelling.
func matchChar(b []byte, c byte, fold bool) (n int, partial bool) {
	switch b[0] {
	case '%':
		if len(b) < 3 {
			if hexPrefix(b[1:]) {
				return 0, true
			}
			break
		}
		if v, ok := hexVal(b[1:3]); ok && byte(v) == c {
			return 3, false
		}
	case '\\':
		if len(b) < 2 {
			return 0, true
		}
		switch b[1] {
		case 'u', 'U':
			if len(b) < 6 {
				if hexPrefix(b[2:]) {
					return 0, true
				}
				break
			}
			if v, ok := hexVal(b[2:6]); ok && v == int(c) {
				return 6, false
			}
		case 'x', 'X':
			if len(b) < 4 {
				if hexPrefix(b[2:]) {
					return 0, true
				}
				break
			}
			if v, ok := hexVal(b[2:4]); ok && v == int(c) {
				return 4, false
			}
		case '/', '"', '\\', '\'':
			if b[1] == c {
				return 2, false
			}
		}
	case '&':
		if v, k, part := entity(b); part {
			return 0, true
		} else if k > 0 && v == int(c) {
			return k, false
		}
	case '+':
		if c == ' ' {
			return 1, false
		}
	}
	if b[0] == c || fold && lower(b[0]) == lower(c) {
		return 1, false
	}
	return 0, false
}

// entity decodes an HTML character reference at the start of b: its value and
// length, or partial when b ends inside one.
func entity(b []byte) (v, n int, partial bool) {
	end := -1
	for i := 1; i < len(b) && i < maxEntity; i++ {
		if b[i] == ';' {
			end = i
			break
		}
		if !(isAlnum(b[i]) || i == 1 && b[i] == '#') {
			break
		}
		if i == len(b)-1 {
			return 0, 0, true
		}
	}
	if len(b) == 1 {
		return 0, 0, true
	}
	if end < 0 {
		// Numeric references may end without ';' (browsers accept them).
		if b[1] != '#' {
			return 0, 0, false
		}
		end = 2
		for end < len(b) && end < maxEntity && isAlnum(b[end]) {
			end++
		}
		if v, ok := numericRef(b[2:end]); ok {
			return v, end, false
		}
		return 0, 0, false
	}
	body := b[1:end]
	if len(body) == 0 {
		return 0, 0, false
	}
	if body[0] == '#' {
		if v, ok := numericRef(body[1:]); ok {
			return v, end + 1, false
		}
		return 0, 0, false
	}
	if v, ok := namedRefs[string(body)]; ok {
		return int(v), end + 1, false
	}
	return 0, 0, false
}

func numericRef(d []byte) (int, bool) {
	if len(d) > 0 && (d[0] == 'x' || d[0] == 'X') {
		d = d[1:]
		if len(d) == 0 || len(d) > 8 {
			return 0, false
		}
		return hexVal(d)
	}
	if len(d) == 0 || len(d) > 8 {
		return 0, false
	}
	v := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// namedRefs are the HTML named character references of ASCII characters.
var namedRefs = map[string]byte{
	"amp": '&', "AMP": '&', "lt": '<', "LT": '<', "gt": '>', "GT": '>', "quot": '"', "QUOT": '"', "apos": '\'',
	"sol": '/', "bsol": '\\', "colon": ':', "equals": '=', "plus": '+', "period": '.', "lowbar": '_', "UnderBar": '_',
	"comma": ',', "excl": '!', "quest": '?', "num": '#', "dollar": '$', "percnt": '%', "ast": '*', "midast": '*',
	"lpar": '(', "rpar": ')', "lsqb": '[', "lbrack": '[', "rsqb": ']', "rbrack": ']', "lcub": '{', "lbrace": '{',
	"rcub": '}', "rbrace": '}', "verbar": '|', "vert": '|', "VerticalLine": '|', "semi": ';', "commat": '@',
	"grave": '`', "DiacriticalGrave": '`', "Hat": '^', "Tab": '\t', "NewLine": '\n', "nbsp": ' ',
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
