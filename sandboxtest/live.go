package sandboxtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// liveWriter collects a stream and creates a file once it has seen want.
type liveWriter struct {
	mu     sync.Mutex
	buf    strings.Builder
	want   string
	signal func()
	at     time.Time // when want was seen
}

func (w *liveWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.at.IsZero() && strings.Contains(w.buf.String(), w.want) {
		w.at = time.Now()
		w.signal()
	}
	return len(p), nil
}

func (w *liveWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// testLiveOutput: RunSpec.Stdout and Stderr get the streams while the run goes on.
// The agent prints, then waits for a file that the host creates only once both
// writers have seen the output, so the run cannot end unless output arrived live.
func testLiveOutput(t *testing.T, s *suite) {
	dir := workspace(t)
	var once sync.WaitGroup
	once.Add(2)
	go func() {
		once.Wait()
		_ = os.WriteFile(filepath.Join(dir, "go"), []byte("1"), 0o644)
	}()
	out := &liveWriter{want: "live-out", signal: once.Done}
	errw := &liveWriter{want: "live-err", signal: once.Done}
	spec := s.spec("live", "await", "/workspace/go", "live-out", "live-err")
	spec.WorkspaceDir = dir
	spec.Limits.Timeout = 30 * time.Second
	spec.Stdout, spec.Stderr = out, errw
	res, err := s.run(t, context.Background(), spec)
	if err != nil {
		t.Fatalf("the run did not end by itself (its output did not arrive while it ran?): %v", err)
	}
	if string(res.Stdout) != "live-out done" || string(res.Stderr) != "live-err" {
		t.Errorf("result stdout=%q stderr=%q", res.Stdout, res.Stderr)
	}
	if out.String() != string(res.Stdout) || errw.String() != string(res.Stderr) {
		t.Errorf("live stdout=%q stderr=%q differ from the result", out.String(), errw.String())
	}

	// Still capped: a flood reaches the writer only up to OutputLimit.
	flood := &liveWriter{want: "\x00never", signal: func() {}}
	spec = s.spec("liveflood", "flood", "100000")
	spec.OutputLimit = 1000
	spec.Stdout = flood
	res = s.mustComplete(t, spec)
	if got := flood.String(); len(got) != 1000 || got != string(res.Stdout) || !res.StdoutTruncated {
		t.Errorf("live writer got %d bytes of a flood capped at 1000 (result %d, truncated %v)", len(got), len(res.Stdout), res.StdoutTruncated)
	}
}

// testLibraryEnvWins: with LLM access, the library's variables (port.LLMEnv) replace
// the caller's of the same name; the caller's other variables pass.
func testLibraryEnvWins(t *testing.T, s *suite) {
	sock := t.TempDir()
	if err := os.Chmod(sock, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := s.spec("libenv", "env")
	spec.LLM = &port.LLMSocket{HostDir: sock}
	spec.OwnBridge = true // the probe never dials; a runner's bridge may wrap it or not
	spec.Env = map[string]string{
		"OPENAI_API_BASE": "http://evil.example", "OPENAI_BASE_URL": "http://evil.example/v1",
		"OPENAI_API_KEY": "sk-caller", "ANTHROPIC_BASE_URL": "http://evil.example",
		"HOSTNAME": "spoofed", "KEEP": "kept",
	}
	res := s.mustComplete(t, spec)
	got := map[string]string{}
	for _, l := range lines(res.Stdout) {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	want := port.LLMEnv()
	want["HOSTNAME"] = port.SandboxHostname
	want["KEEP"] = "kept"
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q in the sandbox, want %q", k, got[k], v)
		}
	}
}
