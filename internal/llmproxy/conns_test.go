package llmproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// serveAndFill opens connections to l until it stops accepting them (the listener's
// Accept loop runs in the background), and returns them.
func serveAndFill(t *testing.T, l *LimitedListener, n int) []net.Conn {
	t.Helper()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c // held open: a slow client
			t.Cleanup(func() { c.Close() })
		}
	}()
	var out []net.Conn
	for range n {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
		t.Cleanup(func() { c.Close() })
	}
	return out
}

func tcpListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestConnPoolFairShare: five runs within their own caps (16 connections each)
// flood a pool of 64 with slow connections; a sixth run still gets its
// guaranteed slots at once: its connections are accepted while the flood holds
// everything else. Asserted on the admission structure (what was accepted),
// not on time.
func TestConnPoolFairShare(t *testing.T) {
	pool := NewConnLimit(64)
	var hostile []*LimitedListener
	for range 5 {
		l := LimitListener(tcpListener(t), 16, pool)
		t.Cleanup(func() { l.Close() })
		hostile = append(hostile, l)
	}
	victim := LimitListener(tcpListener(t), 16, pool)
	t.Cleanup(func() { victim.Close() })
	for _, l := range hostile {
		serveAndFill(t, l, 20) // more than each may hold: the rest wait in the kernel's queue
	}
	// Let the flood take every slot it may: here each hostile run's guarantee
	// (the pool lends nothing once six guarantees and the headroom are set aside).
	want := min(GuaranteedConns, 64/6)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pool.mu.Lock()
		used := pool.used
		pool.mu.Unlock()
		if used >= 5*want || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	held := 0
	for _, l := range hostile {
		held += l.Active()
	}
	if held > 64-want {
		t.Fatalf("the flood holds %d of 64 slots, leaving fewer than the victim's %d", held, want)
	}
	// The victim's connections are accepted while the flood holds its slots.
	var wg sync.WaitGroup
	accepted := make(chan net.Conn, want)
	wg.Go(func() {
		for range want {
			c, err := victim.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	})
	for range want {
		c, err := net.Dial("tcp", victim.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		victim.Close()
		<-done
	}
	close(accepted)
	n := 0
	for c := range accepted {
		n++
		c.Close()
	}
	if n != want {
		t.Errorf("the victim got %d of its %d guaranteed connections while the flood held %d", n, want, held)
	}
}

// TestConnPoolGuaranteeFreedOnClose: a closed listener's guarantee goes back
// to the pool.
func TestConnPoolGuaranteeFreedOnClose(t *testing.T) {
	pool := NewConnLimit(16)
	a := LimitListener(tcpListener(t), 16, pool)
	b := LimitListener(tcpListener(t), 16, pool)
	t.Cleanup(func() { a.Close() })
	serveAndFill(t, a, 16)
	deadline := time.Now().Add(10 * time.Second)
	for a.Active() < 16-GuaranteedConns && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := a.Active(); got > 16-min(GuaranteedConns, 8) {
		t.Fatalf("a holds %d slots with b's guarantee reserved", got)
	}
	b.Close()
	// Alone, a holds all but the headroom (a quarter) kept for runs to come.
	for a.Active() < 12 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := a.Active(); got != 12 {
		t.Errorf("after b closed a holds %d slots, want 12 (the pool less its headroom)", got)
	}
}
