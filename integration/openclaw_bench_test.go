package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// BenchmarkOpenClawOneShot measures what the sandbox adds to a one-shot OpenClaw run:
// the same prompt, alternately, by the CLI on the host talking to the fake LiteLLM
// directly, and by the CLI in a network=none sandbox through the bridge and a per-run
// proxy (the facade's whole run: proxy start, sandbox, audit, proxy stop). Node's
// cold start and OpenClaw's own turn dominate both.
func BenchmarkOpenClawOneShot(b *testing.B) {
	for _, rt := range []struct {
		name string
		new  func(testing.TB, string, imageFunc) (port.SandboxRunner, string)
	}{{"docker", dockerRunnerFor}, {"containerd", containerdRunnerFor}} {
		b.Run(rt.name, func(b *testing.B) {
			// The host CLI has no proxy to inject the key, so the fake accepts the
			// config's placeholder key: both sides then reach the same upstream.
			fake := litellmtest.NewServer(litellmtest.WithReply(markerReply), litellmtest.WithMasterKey(openclaw.PlaceholderAPIKey))
			defer fake.Close()
			stack := newOpenClawStack(b, rt.new, fake)
			launcher := os.Getenv("OPENCLAW_BIN")
			if launcher == "" {
				b.Fatal("OPENCLAW_BIN is not set")
			}

			ctx := context.Background()
			var host, boxed []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				marker := fmt.Sprintf("RUN%c", 'A'+i%26)
				prompt := "Reply with the code word. MARKER=" + marker

				start := time.Now()
				if got := hostOneShot(ctx, b, launcher, fake.URL, prompt); got != "ANSWER-"+marker {
					b.Fatalf("host answer %q", got)
				}
				host = append(host, time.Since(start))

				start = time.Now()
				_, res, runErr := stack.run(ctx, b, sandboxtest.RunID("bench"), port.Attribution{BillingAccountID: "acct-bench"}, openclaw.Files{}, prompt, false)
				out, err := openclaw.ParseRun(res.Run, runErr)
				if err != nil || out.Text() != "ANSWER-"+marker {
					b.Fatalf("sandboxed run: %v %q\n%s", err, out.Text(), tail(res.Run.Stderr))
				}
				boxed = append(boxed, time.Since(start))
			}
			b.StopTimer()
			h := benchutil.Report(b, "host", host)
			s := benchutil.Report(b, "sandboxed", boxed)
			benchutil.Ratio(b, "sandboxed/host-p50", s, h)
		})
	}
}

// hostOneShot runs the CLI on the host with the same one-shot layout and returns
// the answer.
func hostOneShot(ctx context.Context, b *testing.B, launcher, llmURL, prompt string) string {
	b.Helper()
	return hostOneShotResult(ctx, b, launcher, llmURL, prompt).Text()
}

// hostOneShotResult is hostOneShot returning OpenClaw's whole result.
func hostOneShotResult(ctx context.Context, b *testing.B, launcher, llmURL, prompt string) *openclaw.Result {
	b.Helper()
	ws := b.TempDir()
	cfg, err := openclaw.NewConfig(
		openclaw.WithModels(openclaw.Model{ID: "gpt-4o-mini", ContextWindow: 128000, MaxTokens: 16384}),
		openclaw.WithBaseURL(llmURL+"/v1"), openclaw.WithWorkspace(ws), openclaw.WithAgentTimeout(150*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	one := openclaw.OneShot{SessionID: sandboxtest.RunID("host"), Timeout: 150 * time.Second, Command: []string{launcher}, Workspace: ws}
	if err := one.Prepare(ws, cfg, openclaw.Files{}, prompt); err != nil {
		b.Fatal(err)
	}
	argv, err := one.Argv()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	for k, v := range one.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = filepath.Clean(ws)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			b.Fatal(err)
		}
		code = ee.ExitCode()
	}
	res, err := openclaw.ParseResult(code, stdout.Bytes(), stderr.Bytes())
	if err != nil {
		b.Fatalf("host run: %v", err)
	}
	return res
}
