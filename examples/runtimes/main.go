// Command runtimes runs the quickstart's agent (examples/quickstart/agent) on the
// runtime its -target names, and prints the run's Result the same way whatever
// runtime ran it: one program, any of the four runtimes, by one string.
//
//	go run ./examples/runtimes -target docker://
//	go run ./examples/runtimes -target containerd://
//	go run ./examples/runtimes -target 'nomad://127.0.0.1:4646?load=docker%3A%2F%2F'
//	go run ./examples/runtimes -target 'kubernetes://?kubeconfig=admin.kubeconfig&pids=runtime&runtime=runc&load=containerd%3A%2F%2F%2Frun%2Fk8s%2Fcontainerd.sock%3Fnamespace%3Dk8s.io'
//
// The agent's image is built here and loaded with the Sandbox's LoadImage: into the
// engine for Docker and containerd, and for a cluster into the runtime its nodes use,
// which the target's load= names (its client nodes must see this host's paths: one
// machine, or shared storage; see the adapters' Scheme). LiteLLM is $LITELLM_URL with
// $LITELLM_MASTER_KEY or, when they are unset, the fake of litellm/litellmtest on
// loopback. It imports adapters/all, so it links every runtime's client; a program
// for one runtime imports that adapter alone.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentsandbox/sandbox"
	_ "github.com/agentsandbox/sandbox/adapters/all"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
)

// agentPackage is the quickstart's agent.
const agentPackage = "github.com/agentsandbox/sandbox/examples/quickstart/agent"

func main() {
	target := flag.String("target", "docker://", "the runtime (docker://, containerd://, nomad://..., kubernetes://...)")
	prompt := flag.String("prompt", "MARKER:hello-from-any-runtime Please greet me.", "the user message")
	flag.Parse()
	if err := run(os.Stdout, *target, *prompt); err != nil {
		fmt.Fprintln(os.Stderr, "runtimes:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, target, prompt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts := []sandbox.Option{sandbox.WithOwner("runtimes-example")}
	if os.Getenv(sandbox.EnvLiteLLMURL) == "" {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(time.Second))
		defer fake.Close()
		opts = append(opts, sandbox.WithLiteLLM(fake.URL, fake.MasterKey()))
	}
	sb, err := sandbox.Open(ctx, target, opts...)
	if err != nil {
		return err
	}
	defer sb.Close()
	bin, err := agentimage.BuildGo(ctx, agentPackage)
	if err != nil {
		return err
	}
	// The tag derived from the content, not "latest": Nomad's docker driver pulls
	// an image tagged latest before every run, whatever its node holds.
	image, archive, err := agentimage.Static("agentsandbox/quickstart-agent", bin).Archive()
	if err != nil {
		return err
	}
	if _, err := sb.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		return err
	}
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true},
		Image: image,
		// On a cluster the host does not know the image's own command: name it.
		Argv:        []string{agentimage.Entrypoint},
		Messages:    []sandbox.Message{{Role: "user", Content: prompt}},
		Model:       "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-demo"},
		Budget:      port.Budget{MaxCalls: 5},
		Limits:      port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 128 << 20},
		Reconcile:   true,
	})
	printResult(out, res)
	return err
}

// printResult prints the Result's fields, the same lines for every runtime.
func printResult(out io.Writer, res *sandbox.Result) {
	if res == nil || res.Run == nil {
		return
	}
	fmt.Fprintf(out, "exit code: %d\n", res.Run.ExitCode)
	fmt.Fprintf(out, "error code: %q\n", res.Run.ErrorCode)
	fmt.Fprintf(out, "answer: %s\n", res.Text)
	fmt.Fprintf(out, "stdout: %q\n", res.Run.Stdout)
	fmt.Fprintf(out, "truncated: %v %v\n", res.Run.StdoutTruncated, res.Run.StderrTruncated)
	fmt.Fprintf(out, "llm calls audited: %d, refused: %d, budget exceeded: %v\n", len(res.Audit), len(res.Policy.Blocked), res.Policy.BudgetExceeded)
	for _, a := range res.Audit {
		fmt.Fprintf(out, "  %s %s -> %d\n", a.Method, a.Path, a.Status)
	}
	if u := res.Usage; u != nil {
		fmt.Fprintf(out, "reconciled: %d calls, %d tokens, $%.6f; missing: %v\n", u.Total.Calls, u.Total.TotalTokens, u.Total.Spend, u.Missing)
	}
	if a := res.Attestation; a != nil {
		fmt.Fprintf(out, "attested: violations %v\n", a.Violations())
	}
}
