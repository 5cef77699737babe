package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestAuditKeepsWhatMatters floods the audit with refusals, then sends a credentialed
// request and an SSRF attempt: the run's records keep both, the first and the most
// recent refusals, and count what they summarised per class.
func TestAuditKeepsWhatMatters(t *testing.T) {
	var a auditLog
	a.add(port.EgressRecord{Host: "first-forwarded"})
	const flood = 20000
	for i := range flood {
		a.add(port.EgressRecord{Guard: port.GuardAllowlist, Path: fmt.Sprint(i)})
	}
	a.add(port.EgressRecord{Host: "credentialed", Credentials: []string{"token"}})
	a.add(port.EgressRecord{Guard: port.GuardSSRF, Host: "169.254.169.254"})
	recs := a.records()
	sum := a.summary()
	if sum.Records != flood+3 || sum.Kept != len(recs) {
		t.Fatalf("summary %+v, %d records", sum, len(recs))
	}
	want := flood - keepFirstRefused - keepLastRefused
	if sum.Summarised[port.GuardAllowlist] != want || len(sum.Summarised) != 1 {
		t.Fatalf("summarised %v, want %d allowlist", sum.Summarised, want)
	}
	if sum.Kept+want != sum.Records {
		t.Fatalf("kept %d + summarised %d != %d", sum.Kept, want, sum.Records)
	}
	if recs[0].Host != "first-forwarded" || recs[1].Path != "0" || recs[keepFirstRefused].Path != fmt.Sprint(keepFirstRefused-1) {
		t.Fatalf("the first records are not kept in order: %+v %+v", recs[0], recs[1])
	}
	n := len(recs)
	if recs[n-1].Guard != port.GuardSSRF || recs[n-2].Host != "credentialed" || recs[n-3].Path != fmt.Sprint(flood-1) {
		t.Fatalf("the last records: %+v %+v %+v", recs[n-3], recs[n-2], recs[n-1])
	}
	for i := 1; i < n; i++ {
		if recs[i].Path != "" && recs[i-1].Path != "" && recs[i].Path < recs[i-1].Path && len(recs[i].Path) <= len(recs[i-1].Path) {
			t.Fatalf("records out of order at %d: %s after %s", i, recs[i].Path, recs[i-1].Path)
		}
	}
}

// TestAuditFloodKeepsSecurityRefusals: SSRF and placeholder attempts spread through a
// flood of cheap refusals, and one after it followed by more flood, are all kept:
// each guard keeps its own first and last records, so noise evicts only noise. In
// the review every one of 280 such attempts was evicted from the result.
func TestAuditFloodKeepsSecurityRefusals(t *testing.T) {
	var a auditLog
	noise := func(n int) {
		for range n {
			a.add(port.EgressRecord{Guard: port.GuardAllowlist, Host: "evil.test"})
		}
	}
	noise(1500)
	for i := range 280 {
		a.add(port.EgressRecord{Guard: port.GuardSSRF, Host: "169.254.169.254", Path: fmt.Sprintf("/latest/%d", i)})
		a.add(port.EgressRecord{Guard: port.GuardPlaceholder, Host: "api.test", Path: fmt.Sprintf("/store/%d", i)})
		noise(70)
	}
	a.add(port.EgressRecord{Guard: port.GuardSSRF, Host: "10.0.0.1", Path: "/after-flood"})
	noise(5000)
	ssrf, place := 0, 0
	for _, r := range a.records() {
		switch r.Guard {
		case port.GuardSSRF:
			ssrf++
		case port.GuardPlaceholder:
			place++
		}
	}
	if ssrf != 281 || place != 280 {
		t.Fatalf("kept %d SSRF and %d placeholder refusals of 281 and 280 (summary %+v)", ssrf, place, a.summary())
	}
	if sum := a.summary(); len(sum.Summarised) != 1 || sum.Summarised[port.GuardAllowlist] != 1500+280*70+5000-keepFirstRefused-keepLastRefused {
		t.Fatalf("summary %+v", sum)
	}
}

// TestAuditCredentialedBounded: requests that carried a credential are bounded like
// the rest (50,000 of them were all kept before, about 1 KiB of heap each), keeping
// the first and the most recent.
func TestAuditCredentialedBounded(t *testing.T) {
	var a auditLog
	const n = 50000
	for i := range n {
		a.add(port.EgressRecord{Guard: port.GuardBytes, Host: "api.test", Path: fmt.Sprint(i), Credentials: []string{"token"}})
	}
	recs, sum := a.records(), a.summary()
	if len(recs) != keepFirstCredentialed+keepLastCredentialed || sum.Summarised[credentialedKey] != n-len(recs) {
		t.Fatalf("kept %d, summary %+v", len(recs), sum)
	}
	if recs[0].Path != "0" || recs[keepFirstCredentialed-1].Path != fmt.Sprint(keepFirstCredentialed-1) ||
		recs[keepFirstCredentialed].Path != fmt.Sprint(n-keepLastCredentialed) || recs[len(recs)-1].Path != fmt.Sprint(n-1) {
		t.Fatalf("first and last not kept: %s %s %s", recs[0].Path, recs[keepFirstCredentialed].Path, recs[len(recs)-1].Path)
	}
}

// TestAuditRefusalTargets: a refusal records its target even when the guard returns
// before the request is parsed further (an IP literal, a CONNECT to one, the /proxy
// endpoint), and a flood through the proxy does not push it out.
func TestAuditRefusalTargets(t *testing.T) {
	h := newHarness(t, nil)
	raw := func(req string) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	raw("GET http://169.254.169.254/latest/meta-data/?k=v HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n")
	raw("GET http://0x7f.1:8080/admin HTTP/1.1\r\nHost: 0x7f.1:8080\r\n\r\n")
	raw("CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: 10.1.2.3:443\r\n\r\n")
	raw("GET /proxy HTTP/1.1\r\nHost: x\r\nX-Provider: api\r\nX-Target: http://[::1]/secret/path\r\n\r\n")
	raw("GET ftp://files.test/pub HTTP/1.1\r\nHost: files.test\r\n\r\n")
	want := map[string]string{"169.254.169.254": "/latest/meta-data/?k=REDACTED", "127.0.0.1": "/admin", "10.1.2.3": "", "::1": "/secret/path", "files.test": "/pub"}
	for deadline := time.Now().Add(5 * time.Second); len(h.p.Audit()) < len(want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range h.p.Audit() {
		p, ok := want[r.Host]
		if !ok || r.Path != p || r.Guard == "" {
			t.Errorf("record %+v: host and path not filled in", r)
		}
		delete(want, r.Host)
	}
	if len(want) != 0 {
		t.Fatalf("no record for %v", want)
	}
}

// TestAuditFloodThroughProxy: the same through the proxy itself, over one keep-alive
// connection, with the live stream seeing everything.
func TestAuditFloodThroughProxy(t *testing.T) {
	h := newHarness(t, noRateLimit)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const flood = 6000
	go func() {
		w := bufio.NewWriter(c)
		for range flood {
			fmt.Fprintf(w, "GET http://evil.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		}
		w.Flush()
	}()
	br := bufio.NewReader(c)
	for i := range flood {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := h.client().Get(h.url("api.test", "/v1/after?x=1"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	req, _ := http.NewRequest("GET", h.url("api.test", "/v1/cred"), nil)
	req.Header.Set("Authorization", "Bearer {{token}}")
	resp, err = h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	// The record is written once the handler returns, which may be after the client
	// read the response.
	for deadline := time.Now().Add(5 * time.Second); h.p.Summary().Records < flood+2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	recs, sum := h.p.Audit(), h.p.Summary()
	h.mu.Lock()
	live := len(h.live)
	h.mu.Unlock()
	if sum.Records != live || sum.Records < flood+2 {
		t.Fatalf("summary %+v, live %d", sum, live)
	}
	if sum.Summarised[port.GuardAllowlist] != flood-keepFirstRefused-keepLastRefused {
		t.Fatalf("summarised %v", sum.Summarised)
	}
	// The last two records are the two requests after the flood (in either order:
	// each is written when its handler returns).
	var cred *port.EgressRecord
	for i := len(recs) - 2; i < len(recs); i++ {
		if recs[i].Path == "/v1/cred" {
			cred = &recs[i]
		}
	}
	if cred == nil || len(cred.Credentials) != 1 || cred.Credentials[0] != "token" || cred.Status != 200 {
		t.Fatalf("the credentialed request is not among the last records: %+v", recs[len(recs)-2:])
	}
}

// TestParserRefusalsAudited: requests net/http refuses before the handler, and
// tunnels without a valid request, leave a record each.
func TestParserRefusalsAudited(t *testing.T) {
	h := newHarness(t, nil)
	raw := func(s string) string {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, s)
		b, _ := io.ReadAll(c)
		return string(b)
	}
	for _, req := range []string{
		"GET http://api.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",                // duplicate Host
		"GET http://ａｐｉ.test/ HTTP/1.1\r\nHost: ａｐｉ.test\r\n\r\n",                    // fullwidth host
		"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nX-{{a}}: 1\r\n\r\n",      // brace in a header name
		"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nX-A: 1\r\n" + "\x00\r\n", // garbage
	} {
		if got := raw(req); !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("%q: %q", req, got)
		}
	}
	// A tunnel to an allowed host whose content the parser refuses, one with a TLS
	// handshake that fails, one that closes at once.
	tunnel := func(body func(net.Conn)) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", h.up.Port(), h.up.Port())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		body(c)
		io.Copy(io.Discard, br)
	}
	tunnel(func(c net.Conn) {
		tc := tls.Client(c, &tls.Config{ServerName: "api.test", InsecureSkipVerify: true})
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.test\r\nX-{{b}}: 1\r\n\r\n")
		io.Copy(io.Discard, tc)
	})
	tunnel(func(c net.Conn) { c.Write([]byte{0x16, 3, 1, 0, 1, 0}); c.(*net.TCPConn).CloseWrite() })
	tunnel(func(c net.Conn) { c.(*net.TCPConn).CloseWrite() })
	deadline := time.Now().Add(5 * time.Second)
	var recs []port.EgressRecord
	for {
		recs = h.p.Audit()
		if len(recs) >= 7 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var parse, mitm, tls, empty int
	for _, r := range recs {
		if r.Guard != port.GuardRequest || r.Status != 400 {
			continue
		}
		switch {
		case r.Mode == "forward" && strings.Contains(r.Error, "parsed"):
			parse++
		case r.Mode == "mitm" && strings.Contains(r.Error, "parsed") && r.Host == "api.test":
			mitm++
		case strings.Contains(r.Error, "handshake"):
			tls++
		case strings.Contains(r.Error, "first byte"):
			empty++
		}
	}
	if parse != 4 || mitm != 1 || tls != 1 || empty != 1 {
		t.Fatalf("parse %d mitm %d tls %d empty %d: %+v", parse, mitm, tls, empty, recs)
	}
}

// TestPlacementDefault: a credential without a placement goes into Authorization
// only; in the path, the query, another header or the body it is refused with the
// placeholder guard, before any value is fetched, and nothing reaches the upstream.
func TestPlacementDefault(t *testing.T) {
	h := newHarness(t, nil)
	do := func(method, path string, hdr map[string]string, body string) (*http.Response, string) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, h.url("echo.test", path), rd)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := h.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	for name, tc := range map[string]struct {
		method, path string
		hdr          map[string]string
		body         string
	}{
		"path":   {"PUT", "/store/{{token}}", nil, ""},
		"query":  {"GET", "/store?x={{token}}", nil, ""},
		"header": {"GET", "/store", map[string]string{"X-Note": "{{token}}"}, ""},
		"cookie": {"GET", "/store", map[string]string{"Cookie": "s={{token}}"}, ""},
		"body":   {"POST", "/store", map[string]string{"X-Substitute-Body": "true"}, `{"note":"{{token}}"}`},
	} {
		resp, body := do(tc.method, tc.path, tc.hdr, tc.body)
		if resp.StatusCode != 400 || resp.Header.Get("X-Egress-Guard") != port.GuardPlaceholder || !strings.Contains(body, "may not be placed") {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	h.mu.Lock()
	calls := h.credCall
	h.mu.Unlock()
	if calls != 0 || len(h.up.Seen()) != 0 {
		t.Fatalf("credential fetched %d times, upstream saw %d", calls, len(h.up.Seen()))
	}
	resp, body := do("GET", "/ok", map[string]string{"Authorization": "Bearer {{token}}"}, "")
	if resp.StatusCode != 200 || len(h.up.Seen()) != 1 || h.up.Seen()[0].Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("Authorization: %d %s", resp.StatusCode, body)
	}
}

// TestForwardHostMismatchKeepAlive: on one keep-alive connection, a Host header
// naming another host is refused also when the previous request's body spells a head
// with a matching Host for the same request line; requests around it pass.
func TestForwardHostMismatchKeepAlive(t *testing.T) {
	h := newHarness(t, nil)
	hp := "plain.test:" + h.plain.Port()
	fake := "GET http://" + hp + "/page HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var got []int
	for _, req := range []string{
		fmt.Sprintf("POST http://%s/in HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", hp, hp, len(fake), fake),
		fmt.Sprintf("GET http://%s/page HTTP/1.1\r\nHost: evil.test\r\n\r\n", hp),
		fmt.Sprintf("GET http://%s/page HTTP/1.1\r\nhost: %s\r\n\r\n", hp, hp),
		fmt.Sprintf("GET http://%s/page HTTP/1.1\r\nHost: PLAIN.test.:%s\r\n\r\n", hp, h.plain.Port()),
		fmt.Sprintf("GET http://%s/page HTTP/1.1\r\nHost: plain.test:1\r\n\r\n", hp),
		fmt.Sprintf("GET http://%s/page HTTP/1.0\r\n\r\n", hp),
	} {
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 421 200 200 421 200]" {
		t.Fatalf("statuses %v", got)
	}
}

// TestForwardBodyWithBlankLines: a body full of blank lines (each one ends a header
// block for the head recorder) reaches the upstream intact, and the request after it
// on the same connection is checked against its own head.
func TestForwardBodyWithBlankLines(t *testing.T) {
	h := newHarness(t, nil)
	body := strings.Repeat("line\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 12000)
	u := "http://plain.test:" + h.plain.Port() + "/upload"
	c := h.client()
	resp, err := c.Post(u, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	seen := h.plain.Seen()
	if len(seen) != 1 || seen[0].Body != body {
		t.Fatalf("the upstream got %d requests, body intact: %v", len(seen), len(seen) == 1 && seen[0].Body == body)
	}
	resp, err = c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("the next request: %d", resp.StatusCode)
	}
}
