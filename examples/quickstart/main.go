// Command quickstart runs one sandboxed agent end to end: the README's hello world
// plus what a real service sets (its owner, a logger, limits, who pays, live
// progress), with sandbox.Open's defaults for the rest:
//
//   - the agent (./agent, built and loaded as agentsandbox/quickstart-agent:latest)
//     in a sandbox of the runtime -target names (docker://, containerd://, or ""
//     for what this host has), with no network, as uid 1001, read-only root;
//   - the in-process LLM proxy on a per-run unix socket, reached through the bridge
//     at http://127.0.0.1:8080, injecting the key and the billing attribution;
//   - LiteLLM at $LITELLM_URL with $LITELLM_MASTER_KEY or, when they are unset, the
//     fake LiteLLM of litellm/litellmtest on loopback. The master key stays with the
//     host: Open mints a virtual key limited to the LLM routes for the proxies;
//   - the run's usage reconciled call by call against LiteLLM's spend logs.
//
// It uses only the library's public API, so it runs unchanged when copied into a
// module of your own. Run it with `make demo` (which also installs and starts Docker
// and containerd).
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
	_ "github.com/agentsandbox/sandbox/adapters/containerd"
	_ "github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

func main() {
	target := flag.String("target", "docker://", `the runtime: docker://, containerd://, or "" for what this host has`)
	prompt := flag.String("prompt", "MARKER:hello-from-the-sandbox Please greet me.", "the user message")
	verbose := flag.Bool("v", false, "log what the library does")
	flag.Parse()
	if err := run(*target, *prompt, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(target, prompt string, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// What a service sets: its owner (sweeps touch only its own sandboxes) and logger.
	opts := []sandbox.Option{sandbox.WithOwner("quickstart"), sandbox.WithLogger(logger)}
	if os.Getenv(sandbox.EnvLiteLLMURL) == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		opts = append(opts, sandbox.WithLiteLLM(fake.URL, fake.MasterKey()))
		fmt.Printf("LiteLLM: the embedded fake at %s (set LITELLM_URL and LITELLM_MASTER_KEY for a real one)\n", fake.URL)
	}
	sb, err := sandbox.Open(ctx, target, opts...)
	if err != nil {
		return err
	}
	defer sb.Close()
	image, err := loadAgent(ctx, sb)
	if err != nil {
		return err
	}
	fmt.Printf("run on %s with %s\n", orDetected(target), image)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:       sandbox.Grant{AllowSandbox: true},
		Image:       image,
		Messages:    []sandbox.Message{{Role: "user", Content: prompt}},
		Model:       "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-demo", UserID: "user-demo", GraphID: "sandbox:agent"},
		Budget:      port.Budget{MaxCalls: 5},
		Limits:      port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 128 << 20},
		Reconcile:   true,
		Stderr:      prefixed("agent> "), // the agent's progress, live, capped like the result's
	})
	printResult(res)
	return err
}

// loadAgent builds the agent next to this program (./agent) into a FROM scratch
// image and loads it into the runtime, with no registry.
func loadAgent(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	pkg := "./agent"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" && bi.Path != "command-line-arguments" {
		pkg = bi.Path + "/agent" // wherever this program was copied to
	}
	bin, err := agentimage.BuildGo(ctx, pkg)
	if err != nil {
		return "", fmt.Errorf("building the agent: %w", err)
	}
	img := agentimage.Static("agentsandbox/quickstart-agent", bin)
	img.Tag = "latest"
	ref, archive, err := img.Archive()
	if err != nil {
		return "", err
	}
	if _, err := sb.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		return "", err
	}
	return ref, nil
}

// printResult prints what a run left: the agent's exit and answer, the proxy's
// audit, and the usage reconciled from LiteLLM. res may be nil.
func printResult(res *sandbox.Result) {
	if res == nil || res.Run == nil {
		return
	}
	fmt.Printf("\nrun %s: agent exit code %d in %v\nanswer: %s\n", res.RunID, res.Run.ExitCode, res.Run.Duration.Round(time.Millisecond), res.Text)
	fmt.Printf("\naudit (%d LLM calls, written by the proxy; %d refused):\n", len(res.Audit), len(res.Policy.Blocked))
	for _, a := range res.Audit {
		fmt.Printf("  %s %s -> %d, %d bytes, call id %s, ttfb %v, total %v\n", a.Method, a.Path, a.Status, a.RespBytes, a.CallID, a.TTFB.Round(time.Microsecond), a.Latency.Round(time.Microsecond))
	}
	if u := res.Usage; u != nil {
		fmt.Printf("\nreconciled usage (from LiteLLM's spend logs):\n")
		for _, f := range u.Facts {
			fmt.Printf("  %s: model %s, %d prompt + %d completion tokens, $%.6f\n", f.IdempotencyKey, f.Model, f.PromptTokens, f.CompletionTokens, f.Spend)
		}
		fmt.Printf("  total: %d calls, %d tokens, $%.6f; missing: %v\n", u.Total.Calls, u.Total.TotalTokens, u.Total.Spend, u.Missing)
	}
}

func orDetected(target string) string {
	if target == "" {
		return "the runtime this host has"
	}
	return target
}

// prefixed writes each chunk it gets to stdout behind prefix: the live output.
type prefixed string

func (p prefixed) Write(b []byte) (int, error) {
	fmt.Printf("%s%s", p, b)
	return len(b), nil
}
