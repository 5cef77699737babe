package egress

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// target is a checked destination.
type target struct {
	scheme, host string
	port         int
	path         string // decoded, for matching
	escPath      string // template, escaped
	rawQuery     string // template
}

func (t *target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// display is the destination as audited: placeholders in template form, query values
// redacted.
func (t *target) display() string { return clip(t.escPath+redactQuery(t.rawQuery), 512) }

func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.Split(q, "&")
	for i, kv := range parts {
		if k, _, ok := strings.Cut(kv, "="); ok {
			parts[i] = k + "=REDACTED"
		}
	}
	return "?" + strings.Join(parts, "&")
}

// shownTarget fills rec's target from a URL before any check, so that a refusal
// records what was asked for: the host (an IP literal in its normal form), the path
// in template form with query values redacted. The checks overwrite it with the
// normalised target when they pass.
func shownTarget(rec *port.EgressRecord, u *url.URL) {
	rec.Scheme = clip(strings.ToLower(u.Scheme), 16)
	host := u.Hostname()
	if name, ip, err := ParseHost(host); err == nil {
		host = name
		if ip.IsValid() {
			host = ip.String()
		}
	}
	rec.Host = clip(strings.ToLower(host), 256)
	path := u.EscapedPath()
	if path == "" && u.Host != "" {
		path = "/"
	}
	rec.Path = clip(path+redactQuery(u.RawQuery), 512)
}

// checkTarget normalises and checks a URL's scheme, user info, host and path.
func (p *Proxy) checkTarget(u *url.URL) (*target, *port.EgressDenial) {
	shown := clip(u.Scheme+"://"+u.Host, 256)
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, &port.EgressDenial{Status: 403, Guard: port.GuardScheme, Target: clip(scheme, 32) + ":", Message: "only http and https are proxied"}
	}
	if u.User != nil {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: scheme + "://", Message: "URLs with user info are refused"}
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "the URL has no host"}
	}
	t := &target{scheme: scheme, port: defaultPort(scheme)}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "bad port"}
		}
		t.port = n
	}
	if d := p.checkHost(u.Hostname(), t, shown); d != nil {
		return nil, d
	}
	t.escPath = u.EscapedPath()
	if t.escPath == "" {
		t.escPath = "/"
	}
	t.path = u.Path
	if t.path == "" {
		t.path = "/"
	}
	low := strings.ToLower(t.escPath)
	if !cleanPath(t.path) || strings.Contains(low, "%2f") || strings.Contains(low, "%5c") || strings.Contains(low, "%2e") || strings.Contains(low, "%00") {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "the path is not canonical (dot segments, doubled or escaped slashes)"}
	}
	t.rawQuery = u.RawQuery
	return t, nil
}

// checkHost normalises a host into t, refusing IP literals (ssrf when internal,
// allowlist otherwise: a policy names hosts, never addresses).
func (p *Proxy) checkHost(h string, t *target, shown string) *port.EgressDenial {
	name, ip, err := ParseHost(h)
	if err != nil {
		return &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: shown, Message: "bad host"}
	}
	if ip.IsValid() {
		// Without the test exception: a literal never matches a provider anyway, and
		// the agent learns which guard it met.
		strict := Classifier{Self: p.cfg.Classifier.Self}
		if cl := strict.Classify(ip); cl != ClassAllowed {
			return &port.EgressDenial{Status: 403, Guard: port.GuardSSRF, Target: shown, Message: "the destination is an internal address (" + string(cl) + ")"}
		}
		return &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: shown, Message: "IP literals are never on the allowlist"}
	}
	t.host = name
	return nil
}

// allowedMethods are forwarded; others (TRACE, CONNECT inside a tunnel, made-up
// ones) are refused.
var allowedMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

// hop-by-hop and reserved request headers, never forwarded from the agent.
var droppedReqHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Forwarded", "Via", "X-Real-Ip",
	"X-Provider", "X-Target", "X-Substitute-Body", "X-Max-Response-Size", "X-Proxy"}

var droppedRespHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func cleanRequestHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range droppedReqHeaders {
		h.Del(k)
	}
	for k := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-forwarded-") || strings.HasPrefix(lk, "proxy-") {
			delete(h, k)
		}
	}
}

// unbrace turns escaped braces back into braces, so {{name}} is found in URLs
// whatever the client escaped.
var unbrace = strings.NewReplacer("%7B", "{", "%7b", "{", "%7D", "}", "%7d", "}")

// serveForward is the one enforcement path of every request with a known URL:
// checks, placeholders, forwarding, reflection guard, byte caps and audit. mode is
// "forward", "proxy" or "mitm"; want is the endpoint's X-Provider; limit > 0
// truncates the response (the endpoint).
func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request, mode string, u *url.URL, want string, substBody bool, limit int64) {
	rec := port.EgressRecord{Time: time.Now().UTC(), Mode: mode, Method: clip(r.Method, 16)}
	shownTarget(&rec, u)
	t, pr, d := p.admit(r, &rec, mode, u, want)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	h := r.Header.Clone()
	cleanRequestHeaders(h)
	escPath, rawQuery := unbrace.Replace(t.escPath), unbrace.Replace(t.rawQuery)
	// Each credential goes only where its placement allows: a placeholder anywhere
	// else is refused before any value is fetched.
	pc := &placer{pr: pr, host: t.host}
	if d := pc.request(escPath, rawQuery, h); d != nil {
		p.deny(w, rec, d)
		return
	}
	// Body substitution is opt-in, on every way in (the endpoint reads the header
	// before this; curl can send it through the forward proxy too).
	substBody = substBody || strings.EqualFold(r.Header.Get("X-Substitute-Body"), "true")
	body, d := p.substitutableBody(r, substBody, t)
	if d == nil && body != nil {
		d = pc.check(Placeholders(string(body)), "the body", func(pl *placement) bool { return pl.body })
	}
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	// A provider with credentials gets them only through placeholders: credential
	// headers the agent wrote out in full are dropped.
	if len(pr.creds) > 0 {
		for _, k := range []string{"Authorization", "Cookie"} {
			if v := h.Get(k); v != "" && len(Placeholders(v)) == 0 {
				h.Del(k)
			}
		}
	}
	names := pc.names
	if len(names) > 0 && p.withdrawn.Load() {
		p.deny(w, rec, &port.EgressDenial{Status: http.StatusForbidden, Guard: port.GuardReflection, Target: t.host,
			Message: "the run's credentials are withdrawn: a response to an earlier request reflected part of one"})
		return
	}
	vals, d := resolve(r.Context(), p.pol.src.Credentials, p.cfg.RunID, pr, names, t.host)
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	if len(vals) > 0 {
		rec.Credentials = names
	}
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = Substitute(v, vals, nil)
		}
		h[k] = vs
	}
	red := p.compiled.Redactor(vals)
	if red != nil {
		h.Del("Accept-Encoding") // the reflection guard reads plain bodies
	}
	cnt := &countReader{p: p}
	out, d := p.outbound(r, t, h, escPath, rawQuery, vals, body, cnt, &rec)
	if d == nil {
		d = p.sendOne(t.host)
	}
	if d == nil {
		// The head goes upstream too: its bytes count against the run's cap.
		head := requestHeadBytes(out)
		if p.runBytes.Add(head) > p.maxRun {
			p.runBytes.Add(-head) // not sent
			d = &port.EgressDenial{Status: http.StatusForbidden, Guard: port.GuardBytes, Target: t.host, Message: "the run's egress byte cap is reached"}
		}
	}
	if d != nil {
		p.deny(w, rec, d)
		return
	}
	rec.ReqBytes += requestHeadBytes(out)
	p.relay(w, out, rec, t, cnt, red, limit)
}

// relay sends out upstream and writes its answer to w: headers passed through the
// reflection guard (a secret in a header's name drops the header), a compressed body
// decoded for it or refused, the body capped at limit; rec is recorded at the end.
func (p *Proxy) relay(w http.ResponseWriter, out *http.Request, rec port.EgressRecord, t *target, cnt *countReader, red *Redactor, limit int64) {
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.upstreamFailed(w, rec, t, cnt, red, err)
		return
	}
	defer resp.Body.Close()
	var src io.Reader = resp.Body
	if red != nil {
		// The request asked for an identity response; an upstream that compresses
		// anyway is decoded for the reflection guard, or refused when it cannot be.
		dec, err := decodeBody(resp)
		if err != nil {
			rec.ReqBytes, _ = cnt.state()
			p.deny(w, rec, &port.EgressDenial{Status: http.StatusBadGateway, Guard: port.GuardEncoding, Target: t.host, Message: err.Error()})
			return
		}
		src = &redactReader{r: dec, red: red}
	}
	rec.Status = resp.StatusCode
	rh := responseHeadBytes(resp)
	rec.RespBytes += rh
	if p.runBytes.Add(rh) > p.maxRun {
		rec.ReqBytes, _ = cnt.state()
		p.deny(w, rec, &port.EgressDenial{Status: http.StatusForbidden, Guard: port.GuardBytes, Target: t.host, Message: "the run's egress byte cap is reached"})
		return
	}
	hdr, err := guardHeaders(resp.Header, red)
	if err != nil {
		rec.ReqBytes, _ = cnt.state()
		rec.Reflected = red.Count
		p.refuseReflection(w, rec, t, err)
		return
	}
	wh := w.Header()
	for k, vs := range hdr {
		wh[k] = vs
	}
	for _, k := range droppedRespHeaders {
		wh.Del(k)
	}
	if red != nil {
		wh.Del("Content-Length")
		wh.Del("Content-Encoding")
	}
	recorded := false
	defer func() {
		if recorded {
			return
		}
		// The transport may still be sending the body when the answer arrives.
		n, _ := cnt.state()
		rec.ReqBytes += n
		if red != nil {
			rec.Reflected = red.Count
		}
		rec.Latency = time.Since(rec.Time)
		p.record(rec)
	}()
	if err := p.writeResponse(w, resp.StatusCode, src, red, &rec, limit); err != nil {
		// The reflection guard refused the body before any of it was written.
		n, _ := cnt.state()
		rec.ReqBytes += n
		rec.Reflected = red.Count
		recorded = true
		p.refuseReflection(w, rec, t, err)
	}
}

// requestHeadBytes is the size of a request's head on the wire (request line, Host,
// headers, the blank line), as the upstream receives it.
func requestHeadBytes(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.URL.RequestURI()) + len(" HTTP/1.1\r\n") + len("Host: \r\n") + len(r.Host) + 2
	return int64(n) + headerBytes(r.Header)
}

// responseHeadBytes is the size of a response's head (status line, headers).
func responseHeadBytes(r *http.Response) int64 {
	return int64(len("HTTP/1.1 000 \r\n")+len(r.Status)+2) + headerBytes(r.Header)
}

func headerBytes(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(": \r\n") + len(v))
		}
	}
	return n
}

// guardHeaders passes a response's headers through the reflection guard: a value
// spelled in a header's name drops the header, values are redacted; an error (a
// partial reflection, an overlong escape) refuses the response.
func guardHeaders(h http.Header, red *Redactor) (http.Header, error) {
	out := make(http.Header, len(h))
	for k, vs := range h {
		drop, err := red.Name(k)
		if err != nil {
			return nil, err
		}
		if drop {
			continue
		}
		for _, v := range vs {
			v, err := red.Header(v)
			if err != nil {
				return nil, err
			}
			out[k] = append(out[k], v)
		}
	}
	return out, nil
}

// guardFor is the guard that refused a response the reflection guard read.
func guardFor(err error) string {
	if errors.Is(err, errPartialReflection) {
		return port.GuardReflection
	}
	return port.GuardEncoding
}

// refuseReflection answers a response the reflection guard refused before anything
// of it was written; a partial reflection withdraws the run's credentials.
func (p *Proxy) refuseReflection(w http.ResponseWriter, rec port.EgressRecord, t *target, err error) {
	g := guardFor(err)
	if g == port.GuardReflection {
		p.withdrawn.Store(true)
	}
	rec.Error = err.Error()
	p.deny(w, rec, &port.EgressDenial{Status: http.StatusBadGateway, Guard: g, Target: t.host, Message: err.Error()})
}

// admit runs the checks a request passes before anything is read or resolved:
// the target, TLS inside a tunnel, the method, the allowlist (not tunnel-only) and
// the run's byte cap. It fills rec's target and provider.
func (p *Proxy) admit(r *http.Request, rec *port.EgressRecord, mode string, u *url.URL, want string) (*target, *provider, *port.EgressDenial) {
	t, d := p.checkTarget(u)
	if d != nil {
		return nil, nil, d
	}
	rec.Scheme, rec.Host, rec.Path = t.scheme, clip(t.host, 256), t.display()
	if mode == "forward" && r.URL.IsAbs() && r.Method != http.MethodConnect {
		if d := forwardHostOK(r, t); d != nil {
			return nil, nil, d
		}
	}
	if mode == "mitm" && t.scheme != "https" {
		return nil, nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "plain http inside a TLS tunnel"}
	}
	if !allowedMethods[r.Method] {
		return nil, nil, &port.EgressDenial{Status: 403, Guard: port.GuardMethod, Target: t.host, Message: "method " + clip(r.Method, 16) + " is not proxied"}
	}
	pr, d := p.pol.match(t.scheme, t.host, t.port, t.path, true, want, t.host)
	if d != nil {
		return nil, nil, d
	}
	rec.Provider = pr.id
	if pr.tunnelOnly {
		return nil, nil, &port.EgressDenial{Status: 403, Guard: port.GuardAllowlist, Target: t.host, Message: "the provider is tunnel-only: reach it with CONNECT"}
	}
	if p.runBytes.Load() >= p.maxRun {
		return nil, nil, &port.EgressDenial{Status: 403, Guard: port.GuardBytes, Target: t.host, Message: "the run's egress byte cap is reached"}
	}
	return t, pr, nil
}

// substitutableBody reads the request body when placeholders in it are to be
// substituted (within the per-request cap); nil otherwise (the body then streams as
// it is).
func (p *Proxy) substitutableBody(r *http.Request, substBody bool, t *target) ([]byte, *port.EgressDenial) {
	if !substBody || r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.maxReq+1))
	if err != nil {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "the request body could not be read"}
	}
	if int64(len(body)) > p.maxReq {
		return nil, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: "the request body is over the per-request cap"}
	}
	return body, nil
}

// placer collects the credential placeholders of a request, refusing one found
// where its credential's placement does not allow it (the placeholder guard).
type placer struct {
	pr    *provider
	host  string
	names []string
}

// check adds the placeholders found in where, or refuses the first not allowed
// there by ok.
func (pc *placer) check(found []string, where string, ok func(*placement) bool) *port.EgressDenial {
	for _, n := range found {
		if pc.pr.creds[n] && !ok(pc.pr.place(n)) {
			return &port.EgressDenial{Status: 400, Guard: port.GuardPlaceholder, Target: pc.host,
				Message: "placeholder {{" + n + "}} may not be placed in " + where + " (see the credential's placement in the policy)"}
		}
		if !slices.Contains(pc.names, n) {
			pc.names = append(pc.names, n)
		}
	}
	return nil
}

// request checks the path, the query and every header value.
func (pc *placer) request(escPath, rawQuery string, h http.Header) *port.EgressDenial {
	if d := pc.check(Placeholders(escPath), "the path", func(pl *placement) bool { return pl.path }); d != nil {
		return d
	}
	if d := pc.check(Placeholders(rawQuery), "the query", func(pl *placement) bool { return pl.query }); d != nil {
		return d
	}
	for k, vs := range h {
		for _, v := range vs {
			if d := pc.check(Placeholders(v), "the header "+clip(k, 64), func(pl *placement) bool { return pl.headers[k] }); d != nil {
				return d
			}
		}
	}
	return nil
}

// outbound builds the upstream request: the URL with its placeholders substituted
// (and still naming the checked host), the substituted headers, and the body
// (substituted, or streamed through cnt against the caps).
func (p *Proxy) outbound(r *http.Request, t *target, h http.Header, escPath, rawQuery string, vals map[string]string, body []byte, cnt *countReader, rec *port.EgressRecord) (*http.Request, *port.EgressDenial) {
	outURL := t.scheme + "://" + t.hostPort() + Substitute(escPath, vals, url.PathEscape)
	if rawQuery != "" {
		outURL += "?" + Substitute(rawQuery, vals, url.QueryEscape)
	}
	ou, err := url.Parse(outURL)
	if err != nil || ou.Host != t.hostPort() {
		return nil, &port.EgressDenial{Status: 400, Guard: port.GuardRequest, Target: t.host, Message: "the URL is malformed after substitution"}
	}
	out := (&http.Request{Method: r.Method, URL: ou, Header: h, Host: ou.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(r.Context())
	switch {
	case body != nil:
		b := []byte(Substitute(string(body), vals, nil))
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		rec.ReqBytes = int64(len(b))
		p.runBytes.Add(int64(len(b)))
	case r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0:
		if r.ContentLength > p.maxReq {
			return nil, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: "the request body is over the per-request cap"}
		}
		cnt.r, cnt.max = r.Body, p.maxReq
		out.Body, out.ContentLength = io.NopCloser(cnt), r.ContentLength
	default:
		out.Body = http.NoBody
	}
	return out, nil
}

// upstreamFailed answers a request whose round trip failed: a body over the cap
// (413), a guard's refusal of the dial, or 502 with the error (redacted) recorded.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, rec port.EgressRecord, t *target, cnt *countReader, red *Redactor, err error) {
	n, cerr := cnt.state()
	rec.ReqBytes += n
	if cerr != nil {
		p.deny(w, rec, &port.EgressDenial{Status: 413, Guard: port.GuardBytes, Target: t.host, Message: cerr.Error()})
		return
	}
	if dd := denyFor(err, t.host); dd != nil {
		p.deny(w, rec, dd)
		return
	}
	rec.Status, rec.Error, rec.Latency = http.StatusBadGateway, clip(red.String(err.Error()), 256), time.Since(rec.Time)
	p.record(rec)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = io.WriteString(w, `{"error":{"type":"egress_upstream_error","message":"the upstream could not be reached"}}`+"\n")
}

// writeResponse writes the upstream's answer: whole and truncated to limit when
// limit > 0 (the endpoint), else streamed and flushed chunk by chunk against the
// run's byte cap (over it the connection is cut).
func (p *Proxy) writeResponse(w http.ResponseWriter, status int, src io.Reader, red *Redactor, rec *port.EgressRecord, limit int64) error {
	wh := w.Header()
	if limit > 0 {
		buf, err := io.ReadAll(io.LimitReader(src, limit+1))
		if guardError(err) {
			return err
		}
		if int64(len(buf)) > limit {
			buf, rec.Truncated = buf[:limit], true
			wh.Set("X-Truncated", "true")
		}
		wh.Set("Content-Length", strconv.Itoa(len(buf)))
		w.WriteHeader(status)
		n, _ := w.Write(buf)
		rec.RespBytes += int64(n)
		p.runBytes.Add(int64(n))
		if err != nil {
			rec.Error = "upstream body: " + clip(red.String(err.Error()), 200)
		}
		return nil
	}
	// The status goes out with the first bytes of the body (or its end), so a
	// refusal before any byte is still a plain denial.
	wrote := false
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 || rerr != nil && !guardError(rerr) {
			if !wrote {
				w.WriteHeader(status)
				wrote = true
			}
		}
		if n > 0 {
			if p.runBytes.Add(int64(n)) > p.maxRun {
				rec.Error, rec.Guard = "the run's egress byte cap was reached mid-response", port.GuardBytes
				panic(http.ErrAbortHandler)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				rec.Error = "client gone"
				return nil
			}
			rec.RespBytes += int64(n)
			if fl != nil {
				fl.Flush()
			}
		}
		if guardError(rerr) && !wrote {
			return rerr
		}
		if guardError(rerr) {
			// The reflection guard ends the response: the connection is cut, so the
			// agent cannot take what it got for a whole answer.
			rec.Guard, rec.Error = guardFor(rerr), rerr.Error()
			if rec.Guard == port.GuardReflection {
				p.withdrawn.Store(true)
			}
			panic(http.ErrAbortHandler)
		}
		if rerr != nil {
			if rerr != io.EOF {
				rec.Error = "upstream body: " + clip(red.String(rerr.Error()), 200)
			}
			return nil
		}
	}
}

// guardError reports an error of the reflection guard (not of the upstream).
func guardError(err error) bool {
	return errors.Is(err, errPartialReflection) || errors.Is(err, errOverlong) || errors.Is(err, errInflated)
}

// Decompression bounds: a compressed response decoded for the reflection guard may
// grow to inflateFree bytes, then to inflateRatio times the compressed bytes read
// (JSON compresses 5 to 20 times). A gzip bomb (2 MB expanding to 960 MiB, the whole
// run's byte cap and 20 s of scanning in the review) is refused after 8 MiB.
const (
	inflateFree  = 8 << 20
	inflateRatio = 100
)

var errInflated = fmt.Errorf("the upstream's compressed response expands more than %d times: the reflection guard refuses to decode it", inflateRatio)

// inflateBound counts bytes: on the compressed side (in == nil), or on the decoded
// side against the bound above (in: the compressed side's count).
type inflateBound struct {
	r  io.Reader
	in *inflateBound
	n  int64
}

func (b *inflateBound) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.in != nil && b.n > inflateFree+inflateRatio*b.in.n {
		return 0, errInflated
	}
	return n, err
}

// countReader counts a request body against the per-request and per-run caps.
// The transport reads it from its own goroutine, which may outlive RoundTrip.
type countReader struct {
	p   *Proxy
	r   io.Reader
	max int64

	mu  sync.Mutex
	n   int64
	err error
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(n)
	if c.n > c.max {
		c.err = errors.New("the request body is over the per-request cap")
		return 0, c.err
	}
	if c.p.runBytes.Add(int64(n)) > c.p.maxRun {
		c.err = errors.New("the run's egress byte cap is reached")
		return 0, c.err
	}
	return n, err
}

// state is the bytes read so far and the cap error, if one was hit.
func (c *countReader) state() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.err
}

// redactReader runs a body through a Redactor. An error of the guard ends it; an
// error of the upstream is returned after the guard's final release.
type redactReader struct {
	r   io.Reader
	red *Redactor
	buf []byte
	out []byte
	err error // returned once out is drained
}

func (rr *redactReader) Read(b []byte) (int, error) {
	if rr.buf == nil {
		rr.buf = make([]byte, 32<<10)
	}
	for len(rr.out) == 0 {
		if rr.err != nil {
			return 0, rr.err
		}
		n, err := rr.r.Read(rr.buf)
		out, gerr := rr.red.Feed(rr.buf[:n], err != nil)
		switch {
		case gerr != nil:
			return 0, gerr // nothing more goes out
		case err != nil:
			rr.err = err
		}
		rr.out = append(rr.out, out...)
	}
	n := copy(b, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// decodeBody returns resp's body without its content coding: gzip and deflate are
// decoded; any other coding is an error (the reflection guard cannot read it).
func decodeBody(resp *http.Response) (io.Reader, error) {
	ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if len(resp.Header.Values("Content-Encoding")) > 1 || strings.Contains(ce, ",") {
		return nil, errors.New("the upstream sent a response with several content codings, which the reflection guard cannot read")
	}
	in := &inflateBound{r: resp.Body}
	switch ce {
	case "", "identity":
		return resp.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(in)
		if err != nil {
			return nil, errors.New("the upstream sent a gzip response that does not decode")
		}
		return &inflateBound{r: zr, in: in}, nil
	case "deflate":
		zr, err := zlib.NewReader(in)
		if err != nil {
			return nil, errors.New("the upstream sent a deflate response that does not decode")
		}
		return &inflateBound{r: zr, in: in}, nil
	}
	return nil, errors.New("the upstream sent a " + clip(ce, 32) + "-coded response, which the reflection guard cannot read")
}
