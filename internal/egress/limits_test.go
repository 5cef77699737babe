package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestRunByteCapCountsHeads: MaxRunBytes counts request heads (the request line and
// path, every header) and response heads, not only bodies. In the review 400
// requests with a 60 KiB header each went through a 4 MiB cap (24.6 MB of headers and
// 3.1 MB of paths reached the upstream while the audit summed 4 MiB).
func TestRunByteCapCountsHeads(t *testing.T) {
	const cap = 4 << 20
	h := newHarness(t, func(p *port.EgressPolicy) {
		p.MaxRunBytes = cap
		noRateLimit(p)
	})
	var upstreamHeads atomic.Int64
	h.plain.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHeads.Add(int64(len(r.URL.RequestURI()) + len(r.Header.Get("X-Pad"))))
		io.WriteString(w, "ok")
	})
	pad := strings.Repeat("p", 60<<10)
	path := "/" + strings.Repeat("q", 7<<10)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var ok, capped int
	for i := 0; i < 400; i++ {
		fmt.Fprintf(c, "GET http://plain.test:%s%s HTTP/1.1\r\nHost: plain.test:%s\r\nX-Pad: %s\r\n\r\n", h.plain.Port(), path, h.plain.Port(), pad)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 200:
			ok++
		case resp.Header.Get("X-Egress-Guard") == port.GuardBytes:
			capped++
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, resp.Header.Get("X-Egress-Guard"))
		}
	}
	if got := upstreamHeads.Load(); got > cap || capped == 0 {
		t.Fatalf("%d bytes of heads reached the upstream on a %d-byte cap (%d forwarded, %d refused)", got, cap, ok, capped)
	}
	var audited int64
	for _, r := range h.p.Audit() {
		audited += r.ReqBytes + r.RespBytes
	}
	// Response heads are counted when they arrive: the last may pass the cap by its size.
	if audited < upstreamHeads.Load() || audited > cap+1024 {
		t.Fatalf("the audit sums %d bytes; the upstream got %d of heads; cap %d", audited, upstreamHeads.Load(), cap)
	}
	t.Logf("%d requests forwarded, %d refused; %d bytes of heads upstream, %d audited", ok, capped, upstreamHeads.Load(), audited)
}

// TestRequestRateLimit: a run's requests are rate limited (a token bucket, like the
// LLM proxy's), refused ones included: over it a request gets 429 with Retry-After
// and guard rate, and is recorded. Before, one run made 155,003 requests at 2,500 to
// 3,500 a second.
func TestRequestRateLimit(t *testing.T) {
	h := newHarness(t, func(p *port.EgressPolicy) { p.Rate = port.EgressRate{RPS: 1, Burst: 20} })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	statuses := map[int]int{}
	var retry string
	for i := 0; i < 60; i++ {
		target := "http://plain.test:" + h.plain.Port() + "/x"
		if i%2 == 1 {
			target = "http://evil.test/flood" // refused anyway: it counts too
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, strings.Split(strings.TrimPrefix(target, "http://"), "/")[0])
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode == 429 {
			if resp.Header.Get("X-Egress-Guard") != port.GuardRate {
				t.Fatalf("429 with guard %q", resp.Header.Get("X-Egress-Guard"))
			}
			retry = resp.Header.Get("Retry-After")
		}
	}
	if statuses[429] < 35 || statuses[200]+statuses[403] > 25 || retry == "" {
		t.Fatalf("statuses %v, Retry-After %q", statuses, retry)
	}
	rate := 0
	for _, r := range h.p.Audit() {
		if r.Guard == port.GuardRate {
			rate++
			if r.Host == "" {
				t.Fatalf("a rate refusal without its target: %+v", r)
			}
		}
	}
	if rate != statuses[429] {
		t.Fatalf("%d rate refusals recorded, %d answered", rate, statuses[429])
	}
}

// TestRequestCap: a run sends at most MaxRequests requests upstream, whatever the way
// in (forward, inside a terminated tunnel, a tunnel-only CONNECT: once, as what it
// carries is opaque); the next get 429 with guard requests.
func TestRequestCap(t *testing.T) {
	h := newHarness(t, func(p *port.EgressPolicy) { p.MaxRequests = 5 })
	c := h.client()
	urls := []string{"http://plain.test:" + h.plain.Port() + "/a", h.url("api.test", "/v1/b"), h.url("tunnel.test", "/c")}
	var ok, capped int
	for i := 0; i < 9; i++ {
		c.CloseIdleConnections() // a tunnel-only CONNECT counts once, whatever it carries
		resp, err := c.Get(urls[i%3])
		if err != nil {
			capped++ // a tunnel-only CONNECT refused: the client reports the status
			continue
		}
		readAll(t, resp)
		switch {
		case resp.StatusCode == 200:
			ok++
		case resp.StatusCode == 429 && resp.Header.Get("X-Egress-Guard") == port.GuardRequests:
			capped++
		default:
			t.Fatalf("%s: %d", urls[i%3], resp.StatusCode)
		}
	}
	if ok != 5 || capped != 4 {
		t.Fatalf("%d forwarded, %d capped", ok, capped)
	}
	if n := len(h.up.Seen()) + len(h.plain.Seen()); n > 5 {
		t.Fatalf("the upstreams saw %d requests", n)
	}
}

// TestDecompressionBound: a compressed response to a credentialed request, decoded
// for the reflection guard, may not expand more than inflateRatio times (after a
// free 8 MiB): a gzip bomb is cut there (guard encoding), on the forward path and the
// /proxy endpoint; 16 MiB of compressed JSON passes whole. In the review one 2 MB
// response expanded to 960 MiB, scanned for 20 s.
func TestDecompressionBound(t *testing.T) {
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 200 {
		zw.Write(zero) // 200 MiB of zeros
	}
	zw.Close()
	// JSON as APIs send it: 16 MiB of records that differ (it compresses about 6 times).
	var text bytes.Buffer
	zw = gzip.NewWriter(&text)
	rng := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("repository issue pull request comment label milestone user organisation commit branch tag release")
	plain := 0
	for i := 0; plain < 16<<20; i++ {
		line := fmt.Sprintf(`{"id": %d, "name": "%s-%x", "description": "%s %s %s", "stars": %d}`+"\n",
			i, words[rng.IntN(len(words))], rng.Uint64(), words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(100000))
		zw.Write([]byte(line))
		plain += len(line)
	}
	zw.Close()
	t.Logf("bomb: %d bytes compressed, 200 MiB decoded; text: %d bytes compressed, %d decoded", bomb.Len(), text.Len(), plain)
	h := newHarness(t, func(p *port.EgressPolicy) { p.ResponseCeiling = 64 << 20 })
	h.up.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		if strings.HasSuffix(r.URL.Path, "/bomb") {
			w.Write(bomb.Bytes())
			return
		}
		w.Write(text.Bytes())
	})
	get := func(path string) (int, int64, error) {
		req, _ := http.NewRequest("GET", h.url("api.test", path), nil)
		req.Header.Set("Authorization", "Bearer {{token}}")
		resp, err := h.client().Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, n, err
	}
	start := time.Now()
	status, n, err := get("/v1/bomb")
	took := time.Since(start)
	if err == nil && status == 200 || n > 2*inflateFree {
		t.Fatalf("the bomb went through: %d, %d bytes, %v", status, n, err)
	}
	last := h.p.Audit()[len(h.p.Audit())-1]
	if last.Guard != port.GuardEncoding || last.RespBytes > 2*inflateFree {
		t.Fatalf("record %+v", last)
	}
	t.Logf("bomb refused after %d bytes delivered, in %v", n, took)
	if status, n, err = get("/v1/text"); err != nil || status != 200 || n != int64(plain) {
		t.Fatalf("compressed text: %d, %d of %d bytes, %v", status, n, plain, err)
	}
	// The /proxy endpoint buffers: the refusal comes before any byte.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /proxy HTTP/1.1\r\nHost: proxy\r\nX-Provider: api\r\nX-Target: %s\r\nX-Max-Response-Size: %d\r\nAuthorization: Bearer {{token}}\r\n\r\n", h.url("api.test", "/v1/bomb"), 64<<20)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 502 || resp.Header.Get("X-Egress-Guard") != port.GuardEncoding {
		t.Fatalf("/proxy: %d %.200s", resp.StatusCode, body)
	}
}
