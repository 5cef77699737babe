package sandboxbridge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
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
