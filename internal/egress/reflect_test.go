package egress

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// slashy is a credential with the characters encoders treat specially.
const slashy = `sk/Ab+Cd=Ef&Gh<Ij>Kl"Mn'Op_0123456789`

// spellings are reversible encodings of s a standard decoder turns back into s.
func spellings(s string) map[string]string {
	each := func(f func(c byte) string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteString(f(s[i]))
		}
		return b.String()
	}
	html := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")
	return map[string]string{
		"lower %xx":    each(func(c byte) string { return fmt.Sprintf("%%%02x", c) }),
		"upper %XX":    each(func(c byte) string { return fmt.Sprintf("%%%02X", c) }),
		`json \u`:      each(func(c byte) string { return fmt.Sprintf(`\u%04x`, c) }),
		`json \/ \"`:   strings.NewReplacer("/", `\/`, `"`, `\"`).Replace(s),
		"html escape":  html.Replace(s),
		"html decimal": each(func(c byte) string { return fmt.Sprintf("&#%d;", c) }),
		"html hex":     each(func(c byte) string { return fmt.Sprintf("&#x%X;", c) }),
		"js \\x":       each(func(c byte) string { return fmt.Sprintf(`\x%02x`, c) }),
		"mixed": each(func(c byte) string {
			return [...]string{string(c), fmt.Sprintf("%%%02x", c), fmt.Sprintf(`\u%04X`, c), fmt.Sprintf("&#%d;", c)}[int(c)%4]
		}),
		"html named sol":  strings.ReplaceAll(html.Replace(s), "/", "&sol;"),
		"numeric, no ';'": each(func(c byte) string { return fmt.Sprintf("&#%d", c) }) + " ",
	}
}

func reflectHarness(t *testing.T) *harness {
	return newHarness(t, func(p *port.EgressPolicy) {
		p.Providers[1].Credentials = []string{"token", "slashy"}
		p.Credentials = port.CredentialFunc(func(_ context.Context, _, _, name string) (string, error) {
			switch name {
			case "token":
				return canary, nil
			case "slashy":
				return slashy, nil
			}
			return "", errors.New("none")
		})
	})
}

// TestReflectionEncodings: the upstream echoes the credentials in every reversible
// spelling, in its body, a header's value and a header's name; the agent sees
// placeholders only. (Split across headers: TestReflectionPartial.)
func TestReflectionEncodings(t *testing.T) {
	h := reflectHarness(t)
	sp := spellings(slashy)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-"+canary, "1")
		w.Header().Set("X-Lower", spellings(canary)["lower %xx"])
		for name, v := range sp {
			fmt.Fprintf(w, "%s=%s\n", name, v)
		}
	})
	req, _ := http.NewRequest("GET", h.url("echo.test", "/reflect"), nil)
	req.Header.Set("Authorization", "Bearer {{token}} {{slashy}}")
	resp, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	for name := range sp {
		if !strings.Contains(body, name+"={{slashy}}") {
			t.Errorf("%s: not redacted", name)
		}
	}
	for k, vs := range resp.Header {
		if strings.Contains(strings.ToLower(k), "canary") {
			t.Errorf("a header named after the credential reached the agent: %s", k)
		}
		for _, v := range vs {
			if strings.Contains(v, canary[:15]) || strings.Contains(v, canary[14:29]) || strings.Contains(strings.ToLower(v), "%63%61") {
				t.Errorf("header %s: %q", k, v)
			}
		}
	}
	if resp.Header.Get("X-Lower") != "{{token}}" {
		t.Errorf("X-Lower = %q", resp.Header.Get("X-Lower"))
	}
	recs := h.p.Audit()
	if last := recs[len(recs)-1]; last.Reflected < len(sp)+2 {
		t.Errorf("reflected %d, want at least %d", last.Reflected, len(sp)+2)
	}
}

// TestReflectionCompressed: a compressed response to a credentialed request (the proxy
// asked for identity) is decoded and redacted when it is gzip, and refused with the
// encoding guard when the guard cannot read it.
func TestReflectionCompressed(t *testing.T) {
	h := reflectHarness(t)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "" {
			t.Errorf("Accept-Encoding reached the upstream: %q", r.Header.Get("Accept-Encoding"))
		}
		switch r.URL.Path {
		case "/gzip":
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			io.WriteString(zw, "token="+canary+"\n")
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(b.Bytes())
		case "/br":
			w.Header().Set("Content-Encoding", "br")
			w.Write([]byte{0x8b, 0x02, 0x80})
		}
	})
	get := func(path string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", h.url("echo.test", path), nil)
		req.Header.Set("Authorization", "Bearer {{token}}")
		req.Header.Set("Accept-Encoding", "gzip, br")
		resp, err := h.client().Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	resp, body := get("/gzip")
	if body != "token={{token}}\n" || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip: %q %v", body, resp.Header)
	}
	resp, body = get("/br")
	if resp.StatusCode != 502 || resp.Header.Get("X-Egress-Guard") != port.GuardEncoding {
		t.Fatalf("br: %d %q", resp.StatusCode, body)
	}
}

// TestRedactorSpellingsSplit: every spelling is redacted however the stream is cut,
// and text without one is never held back.
func TestRedactorSpellingsSplit(t *testing.T) {
	vals := map[string]string{"slashy": slashy}
	for name, v := range spellings(slashy) {
		text := "a " + v + " b"
		for size := 1; size <= len(text); size += 3 {
			r := NewRedactor(vals)
			out, err := feedChunks(r, text, size)
			if got := strings.TrimSpace(out); err != nil || !strings.HasPrefix(got, "a {{slashy}}") || r.Count != 1 {
				t.Fatalf("%s, chunk %d: %q %v", name, size, out, err)
			}
		}
	}
	r := NewRedactor(vals)
	if got, _ := r.Feed([]byte("data: {\"a\":\"s\\/k & co\"}\n\n"), false); string(got) != "data: {\"a\":\"s\\/k & co\"}\n\n" {
		t.Fatalf("held back: %q", got)
	}
}
