package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// attestSink is a proxy's socket that records the attestation key of every report.
type attestSink struct {
	sock string
	mu   sync.Mutex
	keys []string
}

func newAttestSink(t *testing.T) *attestSink {
	s := &attestSink{sock: filepath.Join(t.TempDir(), "llm.sock")}
	ln, err := net.Listen("unix", s.sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == bridgeapi.AttestationPath {
			s.mu.Lock()
			s.keys = append(s.keys, r.Header.Get(bridgeapi.AttestKeyHeader))
			s.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *attestSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// TestAttestKeyFromEnvironment: a bridge started with its run takes the key out of
// its environment before anything else: it sends it with its report, and the
// command's environment (and the bridge's own afterwards) no longer holds it. A
// value that is not a key is dropped the same, and no key is sent.
func TestAttestKeyFromEnvironment(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"key", bridgeapi.NewAttestKey()},
		{"not-a-key", "not-a-key"},
		{"empty", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := newAttestSink(t)
			out := filepath.Join(t.TempDir(), "env")
			t.Setenv(bridgeapi.AttestKeyEnv, c.value)
			var stderr strings.Builder
			code := run([]string{"-listen", "127.0.0.1:0", "-socket", sink.sock, "-attest", "--", "sh", "-c", `env > "` + out + `"`}, &stderr)
			require.Equal(t, 0, code, stderr.String())
			_, still := os.LookupEnv(bridgeapi.AttestKeyEnv)
			assert.False(t, still, "the bridge kept the key in its environment")
			env, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.NotContains(t, string(env), bridgeapi.AttestKeyEnv, "the command inherited the key's variable")
			want := ""
			if c.name == "key" {
				want = c.value
				assert.NotContains(t, string(env), c.value)
			}
			assert.Equal(t, []string{want}, sink.got(), "the report's key")
		})
	}
}

// TestAttestKeyFromClaim: a stub sends the claim's key with its report; the
// command's environment does not hold it.
func TestAttestKeyFromClaim(t *testing.T) {
	sink := newAttestSink(t)
	out := filepath.Join(t.TempDir(), "env")
	c := bridgeapi.NewClaim([]string{"sh", "-c", `env > "` + out + `"`}, []string{"PATH=" + os.Getenv("PATH")}, "", true, 0, time.Now())
	c.AttestKey = bridgeapi.NewAttestKey()
	msg, err := c.Encode()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	_, err = w.Write(msg)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	old := stdin
	stdin = r
	t.Cleanup(func() { stdin = old })
	var stderr strings.Builder
	require.Equal(t, 0, run([]string{"-claim", "-listen", "127.0.0.1:0", "-socket", sink.sock}, &stderr), stderr.String())
	assert.Equal(t, []string{c.AttestKey}, sink.got())
	env, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.NotContains(t, string(env), c.AttestKey)

	bad := c
	bad.AttestKey = "forged"
	msg, err = bad.Encode()
	require.NoError(t, err)
	r, w, err = os.Pipe()
	require.NoError(t, err)
	_, _ = w.Write(msg)
	require.NoError(t, w.Close())
	stdin = r
	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-claim", "-listen", "127.0.0.1:0", "-socket", sink.sock}, &stderr))
	assert.Contains(t, stderr.String(), "attestation key")
}
