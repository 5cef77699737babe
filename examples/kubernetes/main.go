// Command kubernetes runs the quickstart agent (examples/quickstart/agent) on a
// Kubernetes cluster instead of the local Docker engine: same sandbox facade, same
// lockdown, same LLM proxy guarantees, another runner.
//
//	go run ./examples/kubernetes -local                  # a throwaway single-node cluster
//	go run ./examples/kubernetes -kubeconfig ~/.kube/config -namespace sandboxes
//
// With -local it starts a single-node cluster on this machine (adapters/kubernetes/kubelocal: the
// binaries from $KUBE_BIN_DIR, which scripts/install-kubernetes.sh prints, and a
// containerd of its own) and tears it down at the end. Against an existing cluster
// the node must see this machine's paths (the workspace, the bridge, the init and the
// proxy's socket directory are hostPath mounts), the agent image must be on the node
// or in a registry, and the namespace must admit the network init's NET_ADMIN.
//
// The LLM proxy is node-local (here: the in-process proxy of this program, on the
// one node), its per-run socket directory mounted read-only into the Pod; it reaches
// LiteLLM at $LITELLM_URL with $LITELLM_MASTER_KEY or, when they are unset, the fake
// LiteLLM of litellm/litellmtest on loopback.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/kubernetes"
	"github.com/agentsandbox/sandbox/adapters/kubernetes/kubelocal"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// agentPackage is the quickstart's agent.
const agentPackage = "github.com/agentsandbox/sandbox/examples/quickstart/agent"

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig `file` (default $KUBECONFIG)")
	namespace := flag.String("namespace", "default", "`namespace` of the run's Pod")
	local := flag.Bool("local", false, "start a local single-node cluster for the run")
	prompt := flag.String("prompt", "MARKER:hello-from-kubernetes Please greet me.", "the user message")
	verbose := flag.Bool("v", false, "log what the library does")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *kubeconfig, *namespace, *local, *prompt, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, kubeconfig, namespace string, local bool, prompt string, verbose bool) error {
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	agentBin, err := agentimage.BuildGo(ctx, agentPackage)
	if err != nil {
		return fmt.Errorf("building the agent: %w", err)
	}
	image, archive, err := agentimage.Static("agentsandbox/quickstart-agent", agentBin).Archive()
	if err != nil {
		return err
	}
	var cfg *rest.Config
	opts := []kubernetes.Option{kubernetes.WithNamespace(namespace), kubernetes.WithOwner("kubernetes-example"), kubernetes.WithLogger(logger)}
	if local {
		c, err := kubelocal.Start(ctx, kubelocal.Options{})
		if err != nil {
			return fmt.Errorf("starting a local cluster: %w", err)
		}
		defer c.Close()
		fmt.Fprintf(out, "Kubernetes: a local single-node cluster, ready in %v (runtime classes %v)\n", c.Started.Round(time.Millisecond), c.RuntimeClasses)
		if err := c.ImportImage(ctx, archive); err != nil {
			return err
		}
		cfg = c.Config
		// The local node runs the process-limit runtime wrapper; the image is loaded.
		opts = append(opts, kubernetes.WithRuntimeClass(kubelocal.RuntimeClassRunc), kubernetes.WithRuntimePIDsLimit(),
			kubernetes.WithImagePullPolicy(corev1.PullNever))
	} else {
		if kubeconfig == "" {
			return fmt.Errorf("no cluster: give -kubeconfig (or set KUBECONFIG), or -local")
		}
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return err
		}
		opts = append(opts, kubernetes.WithNodePIDsLimit(4096))
	}

	upstream, key := os.Getenv("LITELLM_URL"), os.Getenv("LITELLM_MASTER_KEY")
	if upstream == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		upstream, key = fake.URL, fake.MasterKey()
		fmt.Fprintf(out, "LiteLLM: the embedded fake at %s\n", upstream)
	}

	runner, err := newRunner(ctx, append(opts, kubernetes.WithConfig(cfg)))
	if err != nil {
		return err
	}
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner("kubernetes-example"), inprocproxy.WithSandboxUID(1001), inprocproxy.WithLogger(logger))
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
	ws, err := sandbox.NewWorkspace("", "")
	if err != nil {
		return err
	}
	defer ws.Remove()
	runID := fmt.Sprintf("kubernetes-example-%d", time.Now().UnixNano())
	fmt.Fprintf(out, "run %s on Kubernetes (namespace %s)\n", runID, namespace)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant:        sandbox.Grant{AllowSandbox: true},
		RunID:        runID,
		Image:        image,
		Argv:         []string{agentimage.Entrypoint},
		WorkspaceDir: ws.Dir(),
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

// newRunner builds what the node needs on its file system (the bridge and the
// init) and a runner with them and opts, and checks that the cluster answers.
func newRunner(ctx context.Context, opts []kubernetes.Option) (*kubernetes.Runner, error) {
	bridgeBin, err := bridge.Build(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("building the bridge: %w", err)
	}
	initBin, err := kubernetes.BuildInit(ctx, filepath.Dir(bridgeBin))
	if err != nil {
		return nil, err
	}
	runner, err := kubernetes.NewRunner(append(opts, kubernetes.WithBridge(bridgeBin), kubernetes.WithInit(initBin))...)
	if err != nil {
		return nil, err
	}
	if err := runner.Ping(ctx); err != nil {
		return nil, err
	}
	return runner, nil
}

// printResult prints what a run left: the agent's exit, answer and stderr, the
// proxy's audit, and the reconciled usage. res may be nil.
func printResult(out io.Writer, res *sandbox.Result) {
	if res != nil && res.Run != nil {
		fmt.Fprintf(out, "\nagent exit code %d in %v\nanswer: %s\n", res.Run.ExitCode, res.Run.Duration.Round(time.Millisecond), res.Text)
		if len(res.Run.Stderr) > 0 {
			fmt.Fprintf(out, "agent stderr: %s\n", res.Run.Stderr)
		}
		fmt.Fprintf(out, "\naudit (%d LLM calls, written by the node-local proxy):\n", len(res.Audit))
		for _, a := range res.Audit {
			fmt.Fprintf(out, "  %s %s -> %d, %d bytes, call id %s, total %v\n", a.Method, a.Path, a.Status, a.RespBytes, a.CallID, a.Latency.Round(time.Microsecond))
		}
	}
	if res != nil && res.Usage != nil {
		t := res.Usage.Total
		fmt.Fprintf(out, "\nreconciled usage: %d calls, %d tokens, $%.6f; missing: %v\n", t.Calls, t.TotalTokens, t.Spend, res.Usage.Missing)
	}
}
