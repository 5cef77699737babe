// Command quickstart runs one sandboxed agent end to end, on the embedded defaults:
//
//   - the agent (./agent) in a Docker (or, with -runtime containerd, containerd)
//     sandbox with no network, as uid 1001, read-only root;
//   - an in-process LLM proxy on a per-run unix socket, reached through the bridge at
//     http://127.0.0.1:8080, injecting the key and the billing attribution;
//   - LiteLLM at $LITELLM_URL with $LITELLM_MASTER_KEY, or, when they are unset, the
//     fake LiteLLM of litellm/litellmtest on loopback. The master key stays with the
//     host: it makes one virtual key limited to the LLM routes the proxy forwards,
//     one model and a budget (LiteLLM's /key/generate), and the proxy holds only
//     that key, deleted at the end;
//   - the run's usage reconciled call by call against LiteLLM's spend logs.
//
// It uses only the library's public API, so it runs unchanged when copied into a
// module of your own (see the README's "From your own module"). Run it with
// `make demo` (which also installs and starts Docker and containerd).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// agentPackage is the agent next to this program (./agent) as an import path, so the
// program finds its agent wherever it is copied to.
func agentPackage() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" && bi.Path != "command-line-arguments" {
		return bi.Path + "/agent"
	}
	return "./agent"
}

func main() {
	runtime := flag.String("runtime", "docker", "container runtime: docker or containerd")
	prompt := flag.String("prompt", "MARKER:hello-from-the-sandbox Please greet me.", "the user message")
	agent := flag.String("agent", agentPackage(), "the agent's Go main `package`, built with the go command in the working directory")
	verbose := flag.Bool("v", false, "log what the library does")
	flag.Parse()
	if err := run(*runtime, *agent, *prompt, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(runtime, agentPkg, prompt string, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	// LiteLLM: the real one if configured, else the fake on loopback.
	upstream, masterKey := os.Getenv("LITELLM_URL"), os.Getenv("LITELLM_MASTER_KEY")
	if upstream == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		upstream, masterKey = fake.URL, fake.MasterKey()
		fmt.Printf("LiteLLM: the embedded fake at %s (set LITELLM_URL and LITELLM_MASTER_KEY for a real one)\n", upstream)
	}
	// The host's LiteLLM client holds the master key: it reads spend logs and makes
	// keys. No proxy and no sandbox ever sees it.
	lc, err := litellm.New(litellm.WithBaseURL(upstream), litellm.WithMasterKey(masterKey), litellm.WithLogger(logger))
	if err != nil {
		return err
	}
	// The proxy's key: a virtual key that can call only the routes the proxy
	// forwards, one model, for an hour, up to a dollar. A real LiteLLM needs its
	// database for virtual keys.
	budget := 1.0
	virtual, err := lc.GenerateKey(ctx, litellm.KeyRequest{
		KeyAlias: "quickstart-proxy", Duration: "1h", Models: []string{"gpt-4o-mini"},
		MaxBudget: &budget, AllowedRoutes: proxypolicy.KeyRoutes(),
	})
	if err != nil {
		return fmt.Errorf("creating the proxy's virtual key (LiteLLM's /key/generate needs its database): %w", err)
	}
	defer lc.DeleteKeys(context.WithoutCancel(ctx), virtual.Key)
	fmt.Printf("proxy key: %s (virtual, routes %v)\n", virtual.KeyName, virtual.AllowedRoutes)

	bridgeBin, image, archive, err := build(ctx, agentPkg)
	if err != nil {
		return err
	}

	runner, closeRunner, err := newRunner(ctx, runtime, bridgeBin, archive, logger)
	if err != nil {
		return err
	}
	defer closeRunner()

	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner("quickstart"), inprocproxy.WithSandboxUID(1001), inprocproxy.WithLogger(logger))
	if err != nil {
		return err
	}
	defer proxies.Shutdown(context.Background())
	reconciler, err := litellmspend.NewReconciler(lc)
	if err != nil {
		return err
	}
	sb, err := sandbox.New(runner,
		sandbox.WithLLM(sandbox.LLM{Proxy: proxies, Upstream: upstream, APIKey: virtual.Key}),
		sandbox.WithReconciler(reconciler),
		sandbox.WithLogger(logger),
	)
	if err != nil {
		return err
	}

	// A workspace the sandbox user (uid 1001) can enter, read and write; removed
	// afterwards whatever the agent left in it.
	workspace, err := sandbox.NewWorkspace("", "")
	if err != nil {
		return err
	}
	defer workspace.Remove()
	runID := fmt.Sprintf("quickstart-%d", time.Now().UnixNano())
	fmt.Printf("run %s on %s\n", runID, runtime)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true},
		RunID:        runID,
		Image:        image,
		WorkspaceDir: workspace.Dir(),
		Messages:     []sandbox.Message{{Role: "user", Content: prompt}},
		Model:        "gpt-4o-mini",
		Attribution:  port.Attribution{BillingAccountID: "acct-demo", UserID: "user-demo", GraphID: "sandbox:agent"},
		Budget:       port.Budget{MaxCalls: 5},
		Limits:       port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 128 << 20},
		Reconcile:    true,
		// The agent's stderr as it is written (its progress), capped like the result's.
		Stderr: prefixed("agent> "),
	})
	printResult(res)
	return err
}

// printResult prints what a run left: the agent's exit and answer, the proxy's
// audit, and the usage reconciled from LiteLLM. res may be nil.
func printResult(res *sandbox.Result) {
	if res != nil && res.Run != nil {
		fmt.Printf("\nagent exit code %d in %v\nanswer: %s\n", res.Run.ExitCode, res.Run.Duration.Round(time.Millisecond), res.Text)
		fmt.Printf("\naudit (%d LLM calls, written by the proxy; %d refused):\n", len(res.Audit), len(res.Policy.Blocked))
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
}

// build builds the bridge and the agent's image (its name and archive).
func build(ctx context.Context, agentPkg string) (bridgeBin, image string, archive []byte, err error) {
	// The bridge is the sandbox's entrypoint, forwarding 127.0.0.1:8080 to the run's
	// proxy; it is built once with the local Go toolchain and cached.
	bridgeBin, err = bridge.Build(ctx, "")
	if err != nil {
		return "", "", nil, fmt.Errorf("building the bridge: %w", err)
	}
	// The agent: a static binary in a FROM scratch image, loaded with no registry.
	agentBin, err := agentimage.BuildGo(ctx, agentPkg)
	if err != nil {
		return "", "", nil, fmt.Errorf("building the agent: %w", err)
	}
	image, archive, err = agentimage.Static("agentsandbox/quickstart-agent", agentBin).Archive()
	return bridgeBin, image, archive, err
}

// newRunner connects to the container runtime, checks that it answers, and loads
// the agent's image archive into it with no registry. The caller closes the runner
// with the returned func.
func newRunner(ctx context.Context, runtime, bridgeBin string, archive []byte, logger *slog.Logger) (port.SandboxRunner, func(), error) {
	switch runtime {
	case "docker":
		r, err := docker.NewRunner(docker.WithBridge(bridgeBin), docker.WithOwner("quickstart"), docker.WithLogger(logger))
		if err != nil {
			return nil, nil, err
		}
		// The constructor does no I/O: Ping says now whether the daemon answers.
		if err := r.Ping(ctx); err != nil {
			r.Close()
			return nil, nil, fmt.Errorf("docker (set DOCKER_HOST, or start it with `make demo`): %w", err)
		}
		if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
			r.Close()
			return nil, nil, err
		}
		return r, func() { r.Close() }, nil
	case "containerd":
		r, err := containerd.NewRunner(containerd.WithBridge(bridgeBin), containerd.WithOwner("quickstart"), containerd.WithLogger(logger))
		if err != nil {
			return nil, nil, err
		}
		if err := r.Ping(ctx); err != nil {
			r.Close()
			return nil, nil, fmt.Errorf("containerd (set CONTAINERD_ADDRESS, or start it with `make demo`): %w", err)
		}
		if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
			r.Close()
			return nil, nil, err
		}
		return r, func() { r.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("unknown runtime %q", runtime)
	}
}

// prefixed writes each chunk it gets to stdout behind prefix: the live output.
type prefixed string

func (p prefixed) Write(b []byte) (int, error) {
	fmt.Printf("%s%s", p, b)
	return len(b), nil
}
