package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/benchutil"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/preload"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// buildCompileCache builds OpenClaw's compile cache under a fresh root with one
// sandboxed one-shot of the test's own (fixed prompt, fake LiteLLM), and returns it
// with the number of files it holds.
func buildCompileCache(ctx context.Context, tb testing.TB, stack *openClawStack) (*openclaw.CompileCache, int) {
	tb.Helper()
	cache, err := openclaw.NewCompileCache(filepath.Join(tb.TempDir(), "compile-cache"), preload.OpenClawVersion)
	if err != nil {
		tb.Fatal(err)
	}
	err = cache.Build(ctx, func(ctx context.Context, m port.Mount) error {
		stack.mounts = []port.Mount{m}
		defer func() { stack.mounts = nil }()
		_, res, runErr := stack.run(ctx, tb, sandboxtest.RunID("cc-build"), port.Attribution{BillingAccountID: "acct-cc"}, openclaw.Files{}, "Reply with the code word. MARKER=BUILD", false)
		out, err := openclaw.ParseRun(res.Run, runErr)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, tail(res.Run.Stderr))
		}
		if out.Text() != "ANSWER-BUILD" {
			return fmt.Errorf("answer %q", out.Text())
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cache, countFiles(tb, cache.Dir())
}

func countFiles(tb testing.TB, dir string) int {
	n := 0
	if err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestOpenClawCompileCacheDocker: a compile cache built once by a sandboxed one-shot
// of the host's own, then mounted read-only where OpenClaw's launcher looks for it
// (/tmp/node-compile-cache), serves the next one-shot: Node reads its entries (its
// own debug log says so) and, the mount being read-only, writes none, and the run
// answers as without it. About 30-60 s (two OpenClaw runs).
func TestOpenClawCompileCacheDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply))
	defer fake.Close()
	stack := newOpenClawStack(t, dockerRunnerFor, fake)
	cache, files := buildCompileCache(ctx, t, stack)
	if files < 100 {
		t.Fatalf("the build run left %d cache files, want OpenClaw's modules", files)
	}
	m, ok := cache.Mount()
	if !ok || m.Writable {
		t.Fatalf("mount %+v %v", m, ok)
	}
	stack.mounts = []port.Mount{m}
	stack.env = map[string]string{"NODE_DEBUG_NATIVE": "COMPILE_CACHE"}
	_, res, runErr := stack.run(ctx, t, sandboxtest.RunID("cc-use"), port.Attribution{BillingAccountID: "acct-cc"}, openclaw.Files{}, "Reply with the code word. MARKER=WARM", false)
	out, err := openclaw.ParseRun(res.Run, runErr)
	if err != nil || out.Text() != "ANSWER-WARM" {
		t.Fatalf("with the cache: %v %q\n%s", err, out.Text(), tail(res.Run.Stderr))
	}
	hit := []byte("reading cache from " + openclaw.CompileCacheTarget + "/openclaw/" + preload.OpenClawVersion + "/")
	if !bytes.Contains(res.Run.Stderr, hit) || !bytes.Contains(res.Run.Stderr, []byte("success")) {
		t.Errorf("Node did not read the mounted cache:\n%s", tail(res.Run.Stderr))
	}
	if after := countFiles(t, cache.Dir()); after != files {
		t.Errorf("the read-only cache changed: %d files, then %d", files, after)
	}
}

// BenchmarkOpenClawCompileCache measures the warm compile cache: the same sandboxed
// one-shot (Docker, fake LiteLLM), alternately without a compile cache (a fresh /tmp:
// Node compiles OpenClaw's modules again) and with the cache built once and mounted
// read-only. Reports both p50s and their ratio.
func BenchmarkOpenClawCompileCache(b *testing.B) {
	ctx := context.Background()
	fake := litellmtest.NewServer(litellmtest.WithReply(markerReply))
	defer fake.Close()
	stack := newOpenClawStack(b, dockerRunnerFor, fake)
	cache, _ := buildCompileCache(ctx, b, stack)
	m, _ := cache.Mount()
	var cold, warm []time.Duration
	one := func(i int, mounts []port.Mount) time.Duration {
		stack.mounts = mounts
		marker := fmt.Sprintf("RUN%c", 'A'+i%26)
		start := time.Now()
		_, res, runErr := stack.run(ctx, b, sandboxtest.RunID("cc-bench"), port.Attribution{BillingAccountID: "acct-bench"}, openclaw.Files{}, "Reply with the code word. MARKER="+marker, false)
		d := time.Since(start)
		out, err := openclaw.ParseRun(res.Run, runErr)
		if err != nil || out.Text() != "ANSWER-"+marker {
			b.Fatalf("run: %v %q\n%s", err, out.Text(), tail(res.Run.Stderr))
		}
		return d
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 { // alternate which goes first
			cold = append(cold, one(i, nil))
			warm = append(warm, one(i, []port.Mount{m}))
		} else {
			warm = append(warm, one(i, []port.Mount{m}))
			cold = append(cold, one(i, nil))
		}
	}
	b.StopTimer()
	c := benchutil.Report(b, "no-cache", cold)
	w := benchutil.Report(b, "warm-cache", warm)
	benchutil.Ratio(b, "warm/no-cache-p50", w, c)
}
