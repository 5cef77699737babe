package sandboxbridge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/runtoken"
)

func TestTokenNamesMatchTheDaemon(t *testing.T) {
	assert.Equal(t, proxyd.TokenFile, bridgeapi.TokenFile)
	assert.Equal(t, runtoken.Header, bridgeapi.TokenHeader)
}

// TestTokenModeSetsTheHeaderAndStreams: with a token file next to the socket
// every request carries the token (an agent's own is replaced), paths go on as
// written, and an event stream passes event by event.
func TestTokenModeSetsTheHeaderAndStreams(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ack := make(chan int)
	sock := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.RequestURI+" "+strings.Join(r.Header.Values(bridgeapi.TokenHeader), ","))
		mu.Unlock()
		if r.URL.Path != "/v1/stream" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for k := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", k)
			w.(http.Flusher).Flush()
			select {
			case <-ack:
			case <-r.Context().Done():
				return
			}
		}
	}))
	const token = "run-1|0|2000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(sock), bridgeapi.TokenFile), []byte(token+"\n"), 0o644))
	addr, stop := runWithPipe(t, sock)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1%2Fkey/list", strings.NewReader("{}"))
	req.Header.Set(bridgeapi.TokenHeader, "forged")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(b))

	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/stream", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	for k := range 3 {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("data: %d\n", k), line)
		_, _ = br.ReadString('\n')
		ack <- k
	}
	resp.Body.Close()
	code, err := stop()
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST /v1%2Fkey/list " + token, "GET /v1/stream " + token}, seen)
}

func TestTokenFileThatIsNoTokenIsIgnored(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "llm.sock")
	for _, content := range []string{"", "a b", "tok\r\nX-Injected: 1", strings.Repeat("x", 600)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, bridgeapi.TokenFile), []byte(content), 0o644))
		assert.Empty(t, readRunToken(sock, slog.New(slog.DiscardHandler)), "%q", content)
	}
	require.NoError(t, os.Remove(filepath.Join(dir, bridgeapi.TokenFile)))
	assert.Empty(t, readRunToken(sock, slog.New(slog.DiscardHandler)))
}

// TestTokenModeReportsACutAnswer: an answer the socket's side cuts mid-body is
// reported at warning level (the agent sees only a broken stream); an agent that
// goes away itself is not.
func TestTokenModeReportsACutAnswer(t *testing.T) {
	for _, agentLeaves := range []bool{false, true} {
		t.Run(fmt.Sprintf("agentLeaves=%v", agentLeaves), func(t *testing.T) {
			release := make(chan struct{})
			sock := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: 0\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close() // the chunked body never ends
				}
			}))
			const token = "run-1|0|2000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(sock), bridgeapi.TokenFile), []byte(token+"\n"), 0o644))
			var logs syncBuffer
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			f := newTokenForwarder(ln, sock, token, slog.New(slog.NewTextHandler(&logs, nil)))
			go f.serve()
			defer f.close()

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/v1/stream", nil)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "data: 0\n", line)
			if agentLeaves {
				resp.Body.Close()
				time.Sleep(100 * time.Millisecond) // the bridge sees the agent gone
				close(release)
				time.Sleep(200 * time.Millisecond)
				assert.NotContains(t, logs.String(), "cut before its end")
				return
			}
			close(release)
			_, err = io.ReadAll(br)
			require.Error(t, err, "the agent sees a broken stream")
			resp.Body.Close()
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cut before its end") }, 5*time.Second, 10*time.Millisecond, "logs: %s", logs.String())
			assert.Contains(t, logs.String(), "level=WARN")
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
