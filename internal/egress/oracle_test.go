package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// oracleStep is how long the hostile upstream pauses after each guess.
const oracleStep = 250 * time.Millisecond

// oracleObservation is what an agent can see of one guess streamed back in the
// response to its credentialed request: the bytes it got, and whether the guess
// reached it before the upstream's pause ended (timing).
type oracleObservation struct {
	Body  string
	Early bool
}

// probeGuesses has the upstream stream each guess (then pause, then a newline) in
// the response to a credentialed request, all guesses in parallel, and returns what
// the agent observed for each.
func probeGuesses(t *testing.T, h *harness, guesses []string) []oracleObservation {
	t.Helper()
	obs := make([]oracleObservation, len(guesses))
	var wg sync.WaitGroup
	for i, g := range guesses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://plain.test:"+h.plain.Port()+"/oracle?g="+g, nil)
			req.Header.Set("Authorization", "Bearer {{token}}")
			resp, err := h.client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var (
				got     []byte
				guessAt time.Time // when the guess was complete at the agent
				sepAt   time.Time // when the newline after the pause arrived
			)
			buf := make([]byte, 256)
			for {
				n, err := resp.Body.Read(buf)
				now := time.Now()
				got = append(got, buf[:n]...)
				if guessAt.IsZero() && strings.HasPrefix(string(got), "G"+g) {
					guessAt = now
				}
				if sepAt.IsZero() && strings.Contains(string(got), "\n") {
					sepAt = now
				}
				if err != nil {
					break
				}
			}
			obs[i] = oracleObservation{Body: string(got), Early: !guessAt.IsZero() && !sepAt.IsZero() && sepAt.Sub(guessAt) > oracleStep/2}
		}()
	}
	wg.Wait()
	return obs
}

// TestReflectionNoTimingOracle: an agent whose upstream streams its guesses at the
// credential (a guess, then a pause) learns nothing from when or what it receives.
// The attack of the review: for each position, try every character after the known
// prefix; the guard that held back exactly the bytes that could begin the value
// released the wrong guesses at once and the right one only after the pause (a
// 40-character token fell in 2,688 requests). Here the agent is even handed the true
// prefix at each step: every candidate is observed the same (same bytes, same
// timing), so no character can be told.
func TestReflectionNoTimingOracle(t *testing.T) {
	h := newHarness(t, nil)
	h.plain.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fl := w.(http.Flusher)
		io.WriteString(w, "G"+r.URL.Query().Get("g"))
		fl.Flush()
		time.Sleep(oracleStep)
		io.WriteString(w, "\nend\n")
	})
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
	recovered := ""
	for pos := 0; pos < 6; pos++ {
		known := canary[:pos] // the true prefix, handed to the agent
		var guesses []string
		for _, c := range alphabet {
			guesses = append(guesses, known+string(c))
		}
		obs := probeGuesses(t, h, guesses)
		distinct := map[oracleObservation][]string{}
		for i, o := range obs {
			// What the agent can compare across candidates: its bytes, less the guess
			// it sent, and the timing.
			o.Body = strings.Replace(o.Body, guesses[i], "<guess>", 1)
			distinct[o] = append(distinct[o], guesses[i])
		}
		if len(distinct) != 1 {
			for o, gs := range distinct {
				t.Logf("observation %+v: %q", o, gs)
			}
			t.Fatalf("position %d: the agent can tell the candidates apart (%d different observations)", pos, len(distinct))
		}
		for o := range distinct {
			if o.Early || o.Body != "G<guess>\nend\n" {
				t.Fatalf("position %d: observation %+v", pos, o)
			}
		}
		// An attacker picking the odd one out finds none: it learns nothing.
		recovered += "?"
	}
	t.Logf("recovered %q of %q", recovered, canary[:6])
	h.checkNoCanary()
}

// TestRedactorReleaseIndependentOfValue: what the guard holds back, and when it
// releases it, depends on the content only: for random streams (full of the values'
// characters, pieces of them and escapes), fed in random chunks, the input released
// after every chunk is the same whatever the value, as long as no run of it is
// redacted (a redaction shows anyway).
func TestRedactorReleaseIndependentOfValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	const alphabet = "abcdef0123%&#;\\ux{}+-\n"
	randVal := func() string {
		b := make([]byte, 20+rng.IntN(20))
		for i := range b {
			b[i] = "abcdef0123"[rng.IntN(10)]
		}
		return string(b)
	}
	for iter := 0; iter < 2000; iter++ {
		v1, v2 := randVal(), randVal()
		var b strings.Builder
		for b.Len() < 400 {
			switch rng.IntN(4) {
			case 0: // a piece of a value, shorter than a redacted run
				v := []string{v1, v2}[rng.IntN(2)]
				i := rng.IntN(len(v) - 8)
				b.WriteString(v[i : i+1+rng.IntN(7)])
			case 1:
				fmt.Fprintf(&b, "&#%0*d;", rng.IntN(8), "abcdef"[rng.IntN(6)])
			default:
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
		}
		text := b.String()
		var chunks []int
		for n := 0; n < len(text); {
			c := 1 + rng.IntN(40)
			chunks = append(chunks, c)
			n += c
		}
		released := func(v string) ([]int64, error) {
			r := NewRedactor(map[string]string{"v": v})
			var rel []int64
			n := 0
			for _, c := range chunks {
				c = min(c, len(text)-n)
				if _, err := r.Feed([]byte(text[n:n+c]), false); err != nil {
					return nil, err
				}
				n += c
				rel = append(rel, r.body.base)
			}
			if r.body.late > 0 {
				t.Fatalf("text %q: bytes marked after they went out", text)
			}
			if r.Count > 0 {
				return nil, errors.New("redacted")
			}
			return rel, nil
		}
		r1, err1 := released(v1)
		r2, err2 := released(v2)
		if err1 != nil || err2 != nil {
			continue // a run was redacted: not this property's case
		}
		if fmt.Sprint(r1) != fmt.Sprint(r2) {
			t.Fatalf("text %q: released %v with %q, %v with %q", text, r1, v1, r2, v2)
		}
	}
}

// TestRedactorRuns: any run of k characters of a value is redacted, wherever it is;
// a shorter one passes; a run that is not the whole value ends the response.
func TestRedactorRuns(t *testing.T) {
	const v = "ghp_0123456789abcdefghijABCDEFGHIJ0123" // 38 bytes: k = 16
	if k := runLen(len(v)); k != 16 {
		t.Fatalf("k = %d", k)
	}
	for _, c := range []struct {
		name, text string
		partial    bool
	}{
		{"whole", "x " + v + " y", false},
		{"whole twice", v + v, false},
		{"15 characters", "x " + v[3:18] + " y", false},
		{"16 characters", "x " + v[3:19] + " y", true},
		{"a prefix at the end of the stream", "x " + v[:36], true},
		{"15 characters at the end of the stream", "x " + v[:15], false},
		{"whole, then a guess right after it", v + v[:16], true},
		{"zero-padded, 16 characters", "x " + spellEach(v[5:21], "&#%07d;") + " y", true},
	} {
		for _, size := range []int{1, 5, 64} {
			r := NewRedactor(map[string]string{"token": v})
			out, err := feedChunks(r, c.text, size)
			if c.partial {
				if !errors.Is(err, errPartialReflection) {
					t.Fatalf("%s: %q %v, want a partial reflection", c.name, out, err)
				}
			} else if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			for i := 0; i+16 <= len(v); i++ {
				if strings.Contains(out, v[i:i+16]) {
					t.Fatalf("%s: a run of 16 in %q", c.name, out)
				}
			}
		}
	}
}

func spellEach(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

// TestRedactorEverySpelling: every spelling of the classes docs/egress.md claims,
// zero-padded references and JavaScript's other escapes included, and a numeric
// escape too long to read refused.
func TestRedactorEverySpelling(t *testing.T) {
	const v = "sk-Gh/Ab_0123456789xyz"
	forms := map[string]string{
		"zero-padded decimal": "&#%010d;",
		"zero-padded hex":     "&#x%08x;",
		"upper X, no ';'":     "&#X%X",
		"\\u{...}":            `\u{%x}`,
		"\\u{0...}":           `\u{%06x}`,
		"\\U":                 `\U%04X`,
		"octal":               `\%03o`,
		"%XX":                 "%%%02X",
	}
	for name, f := range forms {
		text := "a " + spellEach(v, f) + " b"
		r := NewRedactor(map[string]string{"t": v})
		out, err := feedChunks(r, text, 7)
		if err != nil || out != "a {{t}} b" || r.Count != 1 {
			t.Errorf("%s: %q -> %q %v", name, text, out, err)
		}
	}
	// JavaScript's identity escapes (a backslash before a character that is not an
	// escape letter or digit stands for the character).
	const plain = "sk-Gh/Aa_ZYXWVUTSRQ-pq"
	if out, err := feedChunks(NewRedactor(map[string]string{"t": plain}), "("+spellEach(plain, `\%c`)+")", 4); err != nil || out != "({{t}})" {
		t.Errorf("identity escapes: %q %v", out, err)
	}
	// Named references, legacy ones without ';', a mix.
	mixed := "sk&#45;Gh&sol;Ab&lowbar;0123456789xyz"
	if out, err := feedChunks(NewRedactor(map[string]string{"t": v}), "<"+mixed+">", 3); err != nil || out != "<{{t}}>" {
		t.Errorf("mixed: %q %v", out, err)
	}
	amp := "a&ampb&amp;c&lt;d-efghijk"
	if out, err := feedChunks(NewRedactor(map[string]string{"t": "a&b&c<d-efghijk"}), "["+amp+"]", 2); err != nil || out != "[{{t}}]" {
		t.Errorf("legacy: %q %v", out, err)
	}
	// A numeric escape longer than the guard reads is refused, whatever the values.
	for _, text := range []string{"x &#" + strings.Repeat("0", 40) + "103; y", `x \u{` + strings.Repeat("0", 40) + "67} y"} {
		if _, err := feedChunks(NewRedactor(map[string]string{"t": v}), text, 9); !errors.Is(err, errOverlong) {
			t.Errorf("%q: %v, want errOverlong", text, err)
		}
	}
}

// TestReflectionPartial: a response that reflects part of a credential (split
// across headers, a run in the body, a body that ends or breaks in the middle of
// the value) is cut or refused, with the reflection guard, and shows no run of the
// value; then the run's credentials are withdrawn while other requests still pass.
func TestReflectionPartial(t *testing.T) {
	k := runLen(len(canary))
	for _, c := range []struct {
		path    string
		refused bool // 502 before anything was written; else the body is cut
	}{
		{"/split-headers", true},
		{"/body-run", false},
		{"/ends-mid-value", false},
		{"/chunk-breaks", false},
	} {
		t.Run(c.path, func(t *testing.T) {
			h := newHarness(t, nil)
			h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch strings.TrimPrefix(r.URL.Path, "/v1") {
				case "/split-headers":
					w.Header().Set("X-Part-A", canary[:len(canary)-k])
					w.Header().Set("X-Part-B", canary[len(canary)-k:])
				case "/body-run":
					io.WriteString(w, "ok "+canary[2:2+k]+" and more\n")
				case "/ends-mid-value":
					body := "value: " + canary[:len(canary)-2]
					w.Header().Set("Content-Length", fmt.Sprint(len(body)))
					io.WriteString(w, body)
				case "/chunk-breaks":
					conn, brw, _ := w.(http.Hijacker).Hijack()
					defer conn.Close()
					part := "value: " + canary[:len(canary)-3]
					fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(part)+10, part)
					brw.Flush()
				}
			})
			get := func(host, path, auth string) (*http.Response, string, error) {
				req, _ := http.NewRequest("GET", h.url(host, path), nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := h.client().Do(req)
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, string(b), err
			}
			resp, body, err := get("api.test", "/v1"+c.path, "Bearer {{token}}")
			if resp == nil {
				t.Fatalf("no response: %v", err)
			}
			all := body
			for k, vs := range resp.Header {
				all += k + ": " + strings.Join(vs, ",") + "\n"
			}
			for i := 0; i+k <= len(canary); i++ {
				if strings.Contains(all, canary[i:i+k]) {
					t.Fatalf("a run of %d characters of the value reached the agent: %q", k, all)
				}
			}
			if c.refused {
				if resp.StatusCode != 502 || resp.Header.Get("X-Egress-Guard") != port.GuardReflection {
					t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, body)
				}
			} else if err == nil && (resp.StatusCode != 502 || resp.Header.Get("X-Egress-Guard") != port.GuardReflection) {
				// Cut: a broken body, or a denial when nothing had been written yet.
				t.Fatalf("the response was not cut: %d %q", resp.StatusCode, body)
			}
			recs := h.p.Audit()
			if last := recs[len(recs)-1]; last.Guard != port.GuardReflection || len(last.Credentials) != 1 {
				t.Fatalf("record %+v", last)
			}
			// The run's credentials are withdrawn; requests without one still pass.
			resp, body, _ = get("api.test", "/v1/x", "Bearer {{token}}")
			if resp.StatusCode != 403 || resp.Header.Get("X-Egress-Guard") != port.GuardReflection {
				t.Fatalf("after a partial reflection: %d %q", resp.StatusCode, body)
			}
			if resp, body, _ = get("other.test", "/y", ""); resp.StatusCode != 200 {
				t.Fatalf("a request without a credential: %d %q", resp.StatusCode, body)
			}
			h.checkNoCanary()
		})
	}
	// The /proxy endpoint buffers: the refusal comes before any byte.
	h := newHarness(t, nil)
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x "+canary[1:1+k]+" y") })
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /proxy HTTP/1.1\r\nHost: proxy\r\nX-Provider: api\r\nX-Target: %s\r\nAuthorization: Bearer {{token}}\r\n\r\n", h.url("api.test", "/v1/r"))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 502 || resp.Header.Get("X-Egress-Guard") != port.GuardReflection || strings.Contains(body, canary[1:1+k]) {
		t.Fatalf("/proxy: %d %q", resp.StatusCode, body)
	}
}
