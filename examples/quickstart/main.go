// Command quickstart runs one sandboxed agent end to end, on the embedded defaults:
//
//   - the agent (./agent) in a Docker (or, with -runtime containerd, containerd)
//     sandbox with no network, as uid 1001, read-only root;
//   - an in-process LLM proxy on a per-run unix socket, reached through the bridge at
//     http://127.0.0.1:8080, injecting the key and the billing attribution;
//   - LiteLLM at $LITELLM_URL with $LITELLM_MASTER_KEY, or, when they are unset, the
//     fake LiteLLM of litellm/litellmtest on loopback;
//   - the run's usage reconciled call by call against LiteLLM's spend logs.
//
// Run it with `make demo` (which also installs and starts Docker and containerd).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inproc"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/internal/bridge"
	"github.com/agentsandbox/sandbox/internal/testimages"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

const agentPackage = "github.com/agentsandbox/sandbox/examples/quickstart/agent"

func main() {
	runtime := flag.String("runtime", "docker", "container runtime: docker or containerd")
	prompt := flag.String("prompt", "MARKER:hello-from-the-sandbox Please greet me.", "the user message")
	verbose := flag.Bool("v", false, "log what the library does")
	flag.Parse()
	if err := run(*runtime, *prompt, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(runtime, prompt string, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	// LiteLLM: the real one if configured, else the fake on loopback.
	upstream, key := os.Getenv("LITELLM_URL"), os.Getenv("LITELLM_MASTER_KEY")
	if upstream == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		upstream, key = fake.URL, fake.MasterKey()
		fmt.Printf("LiteLLM: the embedded fake at %s (set LITELLM_URL and LITELLM_MASTER_KEY for a real one)\n", upstream)
	}

	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	cache = filepath.Join(cache, "agentsandbox")
	bridgeBin, err := bridge.BuildBinary(ctx, cache)
	if err != nil {
		return fmt.Errorf("building the bridge: %w", err)
	}
	agentBin, err := testimages.BuildStatic(ctx, agentPackage)
	if err != nil {
		return fmt.Errorf("building the agent: %w", err)
	}
	image, archive, err := testimages.Archive(testimages.StaticImage("agentsandbox/quickstart-agent", agentBin))
	if err != nil {
		return err
	}

	var runner port.SandboxRunner
	switch runtime {
	case "docker":
		cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return err
		}
		defer cli.Close()
		if err := testimages.EnsureDocker(ctx, cli, image, archive); err != nil {
			return err
		}
		r, err := docker.NewRunner(docker.WithClient(cli), docker.WithBridge(bridgeBin), docker.WithOwner("quickstart"), docker.WithLogger(logger))
		if err != nil {
			return err
		}
		runner = r
	case "containerd":
		r, err := containerd.NewRunner(containerd.WithBridge(bridgeBin), containerd.WithOwner("quickstart"), containerd.WithLogger(logger))
		if err != nil {
			return err
		}
		defer r.Close()
		if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
			return err
		}
		runner = r
	default:
		return fmt.Errorf("unknown runtime %q", runtime)
	}

	proxies, err := inproc.New(inproc.WithOwner("quickstart"), inproc.WithSandboxUID(1001), inproc.WithLogger(logger))
	if err != nil {
		return err
	}
	defer proxies.Shutdown(context.Background())
	lc, err := litellm.New(litellm.WithBaseURL(upstream), litellm.WithMasterKey(key), litellm.WithLogger(logger))
	if err != nil {
		return err
	}
	reconciler, err := litellmspend.NewReconciler(lc)
	if err != nil {
		return err
	}
	sb, err := sandbox.New(runner,
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: upstream, APIKey: key}),
		sandbox.WithReconciler(reconciler),
		sandbox.WithLogger(logger),
	)
	if err != nil {
		return err
	}

	workspace, err := os.MkdirTemp("", "quickstart-workspace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workspace)
	// The agent runs as uid 1001: it must be able to enter its workspace.
	if err := os.Chmod(workspace, 0o755); err != nil {
		return err
	}
	runID := fmt.Sprintf("quickstart-%d", time.Now().UnixNano())
	fmt.Printf("run %s on %s\n", runID, runtime)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true},
		RunID:        runID,
		Image:        image,
		WorkspaceDir: workspace,
		Messages:     []sandbox.Message{{Role: "user", Content: prompt}},
		Model:        "gpt-4o-mini",
		Attribution:  port.Attribution{BillingAccountID: "acct-demo", UserID: "user-demo", GraphID: "sandbox:agent"},
		Budget:       port.Budget{MaxCalls: 5},
		Limits:       port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 128 << 20},
		Reconcile:    true,
	})
	if res != nil && res.Run != nil {
		fmt.Printf("\nagent exit code %d in %v\nanswer: %s\n", res.Run.ExitCode, res.Run.Duration.Round(time.Millisecond), res.Text)
		if len(res.Run.Stderr) > 0 {
			fmt.Printf("agent stderr: %s\n", res.Run.Stderr)
		}
		fmt.Printf("\naudit (%d LLM calls, written by the proxy):\n", len(res.Audit))
		for _, a := range res.Audit {
			fmt.Printf("  %s %s -> %d, %d bytes, call id %s, ttfb %v, total %v\n", a.Method, a.Path, a.Status, a.RespBytes, a.CallID, a.TTFB.Round(time.Microsecond), a.Latency.Round(time.Microsecond))
		}
	}
	if res != nil && res.Usage != nil {
		fmt.Printf("\nreconciled usage (from LiteLLM's spend logs):\n")
		for _, f := range res.Usage.Facts {
			fmt.Printf("  %s: model %s, %d prompt + %d completion tokens, $%.6f\n", f.IdempotencyKey, f.Model, f.PromptTokens, f.CompletionTokens, f.Spend)
		}
		t := res.Usage.Total
		fmt.Printf("  total: %d calls, %d tokens, $%.6f; missing: %v\n", t.Calls, t.TotalTokens, t.Spend, res.Usage.Missing)
	}
	return err
}
