// Command nomad runs the quickstart agent (examples/quickstart/agent) on a Nomad
// cluster instead of the local Docker engine: same sandbox facade, same lockdown, same
// LLM proxy guarantees, another runner.
//
//	go run ./examples/nomad -local      # a throwaway local cluster (a server, two clients)
//	go run ./examples/nomad -addr http://127.0.0.1:4646
//
// With -local it starts a server and two client agents on this machine (the nomad
// binary from $NOMAD_BIN, which scripts/install-nomad.sh prints) and tears them down
// at the end. Against an existing cluster, its clients need the docker driver with
// volumes enabled and must see this machine's paths (the workspace, the bridge and
// the init are bind-mounted from the node's file system): a one-machine cluster, or
// shared storage. The agent and proxy images are loaded into this machine's Docker
// engine; a cluster of several machines needs them loaded on every client.
//
// The per-run LLM proxy is a sidecar task beside the agent on its node, reaching
// LiteLLM at $LITELLM_URL with a virtual key made with $LITELLM_MASTER_KEY, or, when
// they are unset, the fake LiteLLM of litellm/litellmtest on loopback (the sidecar
// uses the host network).
//
// It uses only the library's public API (the local cluster comes from
// adapters/nomad/nomadlocal), so it builds unchanged in a module of your own.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/adapters/nomad"
	"github.com/agentsandbox/sandbox/adapters/nomad/nomadlocal"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// agentPackage is the quickstart's agent.
const agentPackage = "github.com/agentsandbox/sandbox/examples/quickstart/agent"

func main() {
	addr := flag.String("addr", os.Getenv("NOMAD_ADDR"), "Nomad HTTP API `address` (default $NOMAD_ADDR)")
	local := flag.Bool("local", false, "start a local cluster (a server and two clients) for the run")
	prompt := flag.String("prompt", "MARKER:hello-from-nomad Please greet me.", "the user message")
	verbose := flag.Bool("v", false, "log what the library does")
	flag.Parse()
	if err := run(os.Stdout, *addr, *local, *prompt, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "nomad example:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, addr string, local bool, prompt string, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if local {
		c, err := nomadlocal.Start(ctx, nomadlocal.Options{})
		if err != nil {
			return fmt.Errorf("starting a local cluster: %w", err)
		}
		defer c.Close()
		addr = c.Addr
		fmt.Fprintf(out, "Nomad: a local cluster at %s (nodes %v), ready in %v\n", addr, c.NodeNames, c.Started.Round(time.Millisecond))
	}
	if addr == "" {
		return fmt.Errorf("no cluster: give -addr (or set NOMAD_ADDR), or -local")
	}

	upstream, masterKey := os.Getenv("LITELLM_URL"), os.Getenv("LITELLM_MASTER_KEY")
	if upstream == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		upstream, masterKey = fake.URL, fake.MasterKey()
		fmt.Fprintf(out, "LiteLLM: the embedded fake at %s\n", upstream)
	}
	// The master key stays with the host (spend logs, key management); the sidecar
	// proxies get a virtual key limited to the routes they forward, one model and a
	// budget, deleted at the end.
	lc, err := litellm.New(litellm.WithBaseURL(upstream), litellm.WithMasterKey(masterKey), litellm.WithLogger(logger))
	if err != nil {
		return err
	}
	budget := 1.0
	virtual, err := lc.GenerateKey(ctx, litellm.KeyRequest{
		KeyAlias: "nomad-example-proxy", Duration: "1h", Models: []string{"gpt-4o-mini"},
		MaxBudget: &budget, AllowedRoutes: proxypolicy.KeyRoutes(),
	})
	if err != nil {
		return fmt.Errorf("creating the proxy's virtual key (LiteLLM's /key/generate needs its database): %w", err)
	}
	defer lc.DeleteKeys(context.WithoutCancel(ctx), virtual.Key)

	n, err := prepareNodes(ctx)
	if err != nil {
		return err
	}

	// The Nomad runner is both the sandbox runner and the proxy manager: the proxy
	// runs as a sidecar task in each run's job.
	runner, err := nomad.NewRunner(nomad.WithAddress(addr), nomad.WithOwner("nomad-example"),
		nomad.WithBridge(n.bridge), nomad.WithInit(n.init), nomad.WithProxyImage(n.proxyImage), nomad.WithLogger(logger))
	if err != nil {
		return err
	}
	if err := runner.Ping(ctx); err != nil {
		return err
	}
	reconciler, err := litellmspend.NewReconciler(lc)
	if err != nil {
		return err
	}
	sb, err := sandbox.New(runner,
		sandbox.WithLLM(sandbox.LLM{Proxy: runner, Upstream: upstream, APIKey: virtual.Key}),
		sandbox.WithReconciler(reconciler),
		sandbox.WithLogger(logger),
	)
	if err != nil {
		return err
	}

	// A workspace the sandbox user owns (the facade refuses one it cannot use).
	ws, err := sandbox.NewWorkspace("", "")
	if err != nil {
		return err
	}
	defer ws.Remove()
	workspace := ws.Dir()
	runID := fmt.Sprintf("nomad-example-%d", time.Now().UnixNano())
	fmt.Fprintf(out, "run %s on Nomad at %s\n", runID, addr)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true},
		RunID:        runID,
		Image:        n.image,
		Argv:         []string{agentimage.Entrypoint},
		WorkspaceDir: workspace,
		Messages:     []sandbox.Message{{Role: "user", Content: prompt}},
		Model:        "gpt-4o-mini",
		Attribution:  port.Attribution{BillingAccountID: "acct-demo", UserID: "user-demo", GraphID: "sandbox:agent"},
		Budget:       port.Budget{MaxCalls: 5},
		Limits:       port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 128 << 20},
		Reconcile:    true,
	})
	printResult(out, res)
	return err
}

// nodeParts are what the client nodes run: the bridge and the init on their file
// system, the agent's and the proxy's images in their Docker engine.
type nodeParts struct{ bridge, init, image, proxyImage string }

// prepareNodes builds the bridge, the init and the agent's and proxy's images, and
// loads the images into Docker (the nodes' engine).
func prepareNodes(ctx context.Context) (nodeParts, error) {
	var n nodeParts
	var err error
	if n.bridge, err = bridge.Build(ctx, ""); err != nil {
		return n, fmt.Errorf("building the bridge: %w", err)
	}
	if n.init, err = nomad.BuildInit(ctx, filepath.Dir(n.bridge)); err != nil {
		return n, err
	}
	agentBin, err := agentimage.BuildGo(ctx, agentPackage)
	if err != nil {
		return n, fmt.Errorf("building the agent: %w", err)
	}
	image, agentArchive, err := agentimage.Static("agentsandbox/quickstart-agent", agentBin).Archive()
	if err != nil {
		return n, err
	}
	proxyImage, proxyArchive, err := nomad.ProxyImage(ctx)
	if err != nil {
		return n, err
	}
	n.image, n.proxyImage = image, proxyImage
	d, err := docker.NewRunner()
	if err != nil {
		return n, err
	}
	defer d.Close()
	for _, a := range [][]byte{agentArchive, proxyArchive} {
		if _, err := d.LoadImage(ctx, bytes.NewReader(a)); err != nil {
			return n, fmt.Errorf("loading an image into Docker: %w", err)
		}
	}
	return n, nil
}

// printResult prints what a run left: the agent's exit, answer and stderr, the
// proxy's audit, and the reconciled usage. res may be nil.
func printResult(out io.Writer, res *sandbox.Result) {
	if res != nil && res.Run != nil {
		fmt.Fprintf(out, "\nagent exit code %d in %v\nanswer: %s\n", res.Run.ExitCode, res.Run.Duration.Round(time.Millisecond), res.Text)
		if len(res.Run.Stderr) > 0 {
			fmt.Fprintf(out, "agent stderr: %s\n", res.Run.Stderr)
		}
		fmt.Fprintf(out, "\naudit (%d LLM calls, written by the sidecar proxy):\n", len(res.Audit))
		for _, a := range res.Audit {
			fmt.Fprintf(out, "  %s %s -> %d, %d bytes, call id %s, total %v\n", a.Method, a.Path, a.Status, a.RespBytes, a.CallID, a.Latency.Round(time.Microsecond))
		}
	}
	if res != nil && res.Usage != nil {
		t := res.Usage.Total
		fmt.Fprintf(out, "\nreconciled usage: %d calls, %d tokens, $%.6f; missing: %v\n", t.Calls, t.TotalTokens, t.Spend, res.Usage.Missing)
	}
}
