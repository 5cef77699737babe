package testenv

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
)

// SharedPart is one real part (a cluster) a test binary starts once in TestMain and
// hands to every test: Main starts it, runs the tests and tears it down, also when the
// binary is interrupted; Get gives it to a test or skips it (fails under
// SANDBOX_REQUIRE) saying why there is none.
type SharedPart[P interface{ Close() error }] struct {
	// Part names the part for SANDBOX_REQUIRE ("nomad", "kubernetes").
	Part string
	// Name prefixes the lines Main writes to stderr.
	Name string

	mu  sync.Mutex
	p   P
	ok  bool
	err error
}

// Main runs m with the part start returns. When start fails the tests still run and
// Get reports the error. check, when set, runs after the teardown; a non-empty result
// (what the teardown left) fails the binary.
func (s *SharedPart[P]) Main(m *testing.M, start func() (P, error), check func(P) []string) int {
	p, err := start()
	s.mu.Lock()
	s.p, s.ok, s.err = p, err == nil, err
	s.mu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
		return m.Run()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sig; ok {
			_ = p.Close()
			os.Exit(2)
		}
	}()
	code := m.Run()
	signal.Stop(sig)
	close(sig)
	if err := p.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: tearing down: %v\n", s.Name, err)
		if code == 0 {
			code = 1
		}
	}
	if check != nil {
		if left := check(p); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "%s: the teardown left %v\n", s.Name, left)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Fail records why there is no part (Main was not reached, or a prerequisite is
// missing); Get reports it.
func (s *SharedPart[P]) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Get returns the part Main started, or skips t (fails it when SANDBOX_REQUIRE names
// the part) with the reason there is none.
func (s *SharedPart[P]) Get(t testing.TB) P {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	reason := fmt.Sprintf("no %s (%s.Main was not called from TestMain)", s.Part, s.Name)
	if s.err != nil {
		reason = s.err.Error()
	}
	Need(t, s.Part, s.ok, reason)
	return s.p
}
