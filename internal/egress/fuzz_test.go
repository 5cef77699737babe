package egress

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParseHost: a host is a name or an address, never both; names are canonical
// (lower case, no trailing dot, safe characters) and parse to themselves; an
// address never slips past the classifier as a name.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "127.0.0.1.", "[::1]", "[fe80::1%25eth0]",
		"api.example.com", "API.Example.COM.", "a..b", "0x", "1.2.3.4.5", "[::ffff:10.0.0.1]", "xn--bcher-kva.example", "1e3", "0.0.0.0x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		name, ip, err := ParseHost(h)
		if err != nil {
			return
		}
		if (name != "") == ip.IsValid() {
			t.Fatalf("%q: name %q and ip %v", h, name, ip)
		}
		if name == "" {
			return
		}
		if name != strings.ToLower(name) || strings.HasSuffix(name, ".") || strings.ContainsAny(name, "%:[]/@\\ \x00") {
			t.Fatalf("%q: name %q is not canonical", h, name)
		}
		again, ip2, err := ParseHost(name)
		if err != nil || again != name || ip2.IsValid() {
			t.Fatalf("%q: %q does not parse to itself (%q, %v, %v)", h, name, again, ip2, err)
		}
		// A name is never all numeric labels (inet_aton would read it as an address).
		labels := strings.Split(name, ".")
		if isNumericLabel(labels[len(labels)-1]) {
			t.Fatalf("%q: name %q ends in a numeric label", h, name)
		}
	})
}

// FuzzTargetURL: whatever the agent writes as a URL, a target the proxy accepts has
// a canonical host, an http(s) scheme, no user info, and a clean path.
func FuzzTargetURL(f *testing.F) {
	for _, s := range []string{"https://api.test/v1/x", "http://a@b/", "https://api.test/v1/../x", "https://api.test/%2e%2e/", "file:///etc/passwd",
		"https://API.test.:443/v1/{{token}}?q={{token}}", "http://[::1]:80/", "https://0x7f.1/", "gopher://x/"} {
		f.Add(s)
	}
	p := &Proxy{cfg: Config{Classifier: &Classifier{}}}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		tg, d := p.checkTarget(u)
		if d != nil {
			if d.Guard == "" || d.Status < 400 {
				t.Fatalf("%q: bad denial %+v", s, d)
			}
			return
		}
		if tg.scheme != "http" && tg.scheme != "https" || u.User != nil || !cleanPath(tg.path) || tg.port < 1 || tg.port > 65535 {
			t.Fatalf("%q accepted as %+v", s, tg)
		}
		if name, ip, err := ParseHost(tg.host); err != nil || name != tg.host || ip.IsValid() {
			t.Fatalf("%q: host %q is not a canonical name", s, tg.host)
		}
	})
}

// FuzzSubstitute: substitution replaces exactly the known placeholders; the values
// escaped for a path stay inside one path segment.
func FuzzSubstitute(f *testing.F) {
	f.Add("/v1/{{token}}/x", "s3cr/et?#")
	f.Add("{{{token}}}{{token}", "v")
	f.Add("a{{tok en}}b{{token}}", "\x00")
	f.Fuzz(func(t *testing.T, tmpl, val string) {
		vals := map[string]string{"token": val}
		out := Substitute(tmpl, vals, url.PathEscape)
		if !strings.Contains(tmpl, "{{token}}") && out != tmpl {
			t.Fatalf("%q changed without a placeholder: %q", tmpl, out)
		}
		if strings.Count(out, "/") != strings.Count(tmpl, "/") {
			t.Fatalf("%q: a value added a path separator: %q", tmpl, out)
		}
		if strings.Contains(tmpl, "{{token}}") && !strings.Contains(out, url.PathEscape(val)) {
			t.Fatalf("%q: the value is missing from %q", tmpl, out)
		}
	})
}

// FuzzRedactor: however a stream is split, the guard says the same (the same output,
// or the same refusal), and no run of a value as long as the guard redacts survives.
func FuzzRedactor(f *testing.F) {
	f.Add([]byte("abc secret-value-1 def secret-value-1"), uint8(3))
	f.Add([]byte("secret-valsecret-value-1ue-1"), uint8(1))
	f.Add([]byte("x &#0000115;ecret-value-1 %73ecret-value-1\n"), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		vals := map[string]string{"a": "secret-value-1", "b": "value-1-other"}
		whole, werr := NewRedactor(vals).Feed(data, true)
		n := int(split)%16 + 1
		r := NewRedactor(vals)
		out, err := feedChunks(r, string(data), n)
		if r.body != nil && r.body.late > 0 {
			t.Fatalf("split %d: %d bytes were marked after they went out", n, r.body.late)
		}
		if (werr == nil) != (err == nil) {
			t.Fatalf("split %d: %v, whole: %v", n, err, werr)
		}
		if err != nil {
			return
		}
		if out != string(whole) {
			t.Fatalf("split %d: %q != %q", n, out, whole)
		}
		for _, v := range vals {
			k := runLen(len(v))
			for i := 0; i+k <= len(v); i++ {
				if strings.Contains(out, v[i:i+k]) {
					t.Fatalf("a run of %q survived in %q", v, out)
				}
			}
		}
	})
}

// FuzzRedactorReuse: a Redactor reads each header name and value with one scanner,
// reset between them, and a per-run Compiled hands out the same compiled values. Every
// call must answer as a fresh Redactor does, whatever the calls before it read (a run
// left pending, an error).
func FuzzRedactorReuse(f *testing.F) {
	f.Add([]byte("secret-value-1\x00secret-val\x00SECRET-VALUE-1\x00x%73ecret-value-1"))
	f.Add([]byte("value-1-oth\x00value-1-other\x00\x00&#115;ecret-value-1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vals := map[string]string{"a": "secret-value-1", "b": "value-1-other", "c": "other-value-22"}
		var c Compiled
		reused := c.Redactor(vals)
		for i, part := range strings.Split(string(data), "\x00") {
			fresh := c.Redactor(vals)
			if i%2 == 1 {
				fresh = NewRedactor(vals)
			}
			var got, want any
			switch i % 3 {
			case 0:
				v, err := reused.Header(part)
				w, werr := fresh.Header(part)
				got, want = [2]any{v, err}, [2]any{w, werr}
			case 1:
				d, err := reused.Name(part)
				w, werr := fresh.Name(part)
				got, want = [2]any{d, err}, [2]any{w, werr}
			default:
				got, want = reused.String(part), fresh.String(part)
			}
			if got != want {
				t.Fatalf("call %d on %q: reused %v, fresh %v", i, part, got, want)
			}
			if reused.short != nil && reused.short.late > 0 {
				t.Fatalf("call %d: %d bytes marked after they went out", i, reused.short.late)
			}
		}
	})
}
