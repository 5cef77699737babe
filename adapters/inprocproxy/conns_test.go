package inprocproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
)

// TestHostileRunCannotStarveAnother: a run that opens thousands of connections to
// its socket holds at most its share of the host's descriptors, and another run's
// first byte is not delayed by more than a small bound.
func TestHostileRunCannotStarveAnother(t *testing.T) {
	const hostile = 2000
	up := newUpstream(t)
	m, _ := newManager(t, WithConnLimits(16, 64))
	a := start(t, m, testSpec("run-hostile", up.URL))
	b := start(t, m, testSpec("run-victim", up.URL))

	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	var wg sync.WaitGroup
	for range hostile {
		wg.Go(func() {
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err := d.Dial("unix", a.SocketPath())
			if err != nil {
				return // the listen queue is full: the kernel pushes back on the sandbox
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	mu.Lock()
	opened := len(conns)
	mu.Unlock()
	require.Greater(t, opened, 100, "the hostile run could open many connections")
	assert.LessOrEqual(t, a.ln.Active(), 16, "the host accepted more than the run's share")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandbox/v1/chat/completions", stringsReader(chatRequest))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client(b).Do(req)
	require.NoError(t, err)
	ttfb := time.Since(t0)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Less(t, ttfb, 500*time.Millisecond, "another run's first byte was delayed")

	// Once the hostile connections close, the run is served again.
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	mu.Unlock()
	resp2, body := get(t, client(a), "/v1/models")
	assert.Equal(t, http.StatusOK, resp2.StatusCode, body)
}

func TestLimitListenerSharedPool(t *testing.T) {
	pool := llmproxy.NewConnLimit(1)
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l1, l2 := llmproxy.LimitListener(ln1, 4, pool), llmproxy.LimitListener(ln2, 4, pool)
	defer l1.Close()
	defer l2.Close()
	go func() { c, _ := net.Dial("tcp", ln1.Addr().String()); defer c.Close(); time.Sleep(time.Second) }()
	c1, err := l1.Accept()
	require.NoError(t, err)
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l2.Accept()
		if err == nil {
			got <- c
		}
	}()
	c2, err := net.Dial("tcp", ln2.Addr().String())
	require.NoError(t, err)
	defer c2.Close()
	select {
	case <-got:
		t.Fatal("the second listener accepted past the shared pool")
	case <-time.After(100 * time.Millisecond):
	}
	c1.Close()
	select {
	case c := <-got:
		c.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the slot freed by a close was not reused")
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// TestFloodOfRunsCannotStarveAnother: the review's attack. 20 runs, each within
// its own cap, hold 70 slow connections each (more than the manager's pool of
// 1,024); a 21st run is still served at once, because each run is guaranteed
// its share of the pool (llmproxy.GuaranteedConns). The bound (3 s, where the
// flood's connections hold their slots for the 5 s header timeout) only tells a
// guaranteed slot from waiting for the flood to time out; latency itself is
// measured in BenchmarkFirstByteUnderFlood. About 1.5 s.
func TestFloodOfRunsCannotStarveAnother(t *testing.T) {
	const runs, perRun = 20, 70
	up := newUpstream(t)
	m, _ := newManager(t)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	var wg sync.WaitGroup
	var flood []*Proxy
	for i := range runs {
		p := start(t, m, testSpec(fmt.Sprintf("run-flood-%02d", i), up.URL))
		flood = append(flood, p)
		for range perRun {
			wg.Go(func() {
				c, err := (&net.Dialer{Timeout: 2 * time.Second}).Dial("unix", p.SocketPath())
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	// Let the flood take all it may: its accepted connections stop growing.
	held, stable := 0, 0
	for deadline := time.Now().Add(10 * time.Second); stable < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		n := 0
		for _, p := range flood {
			n += p.ln.Active()
		}
		if n == held {
			stable++
		} else {
			held, stable = n, 0
		}
	}
	t.Logf("the flood holds %d connections", held)
	victim := start(t, m, testSpec("run-victim", up.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandbox/v1/chat/completions", stringsReader(chatRequest))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client(victim).Do(req)
	require.NoError(t, err, "the victim run was not served while the flood held the pool")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
