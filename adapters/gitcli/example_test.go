package gitcli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/port"
)

// The whole relay: clone before the run, export and push after it. The token stays on
// the host; the agent's image needs no git of ours.
func ExampleNewRelay() {
	runner, err := docker.NewRunner()
	if err != nil {
		panic(err)
	}
	relay, err := gitcli.NewRelay(runner,
		gitcli.WithExporter("/opt/agentsandbox/sandbox-git-export"), // shipped, or built with BuildExporter
		gitcli.WithCredentials(func(ctx context.Context, url string) (gitcli.Credential, error) {
			return gitcli.Credential{Username: "x-access-token", Password: os.Getenv("GITHUB_TOKEN")}, nil
		}))
	if err != nil {
		panic(err)
	}
	run := func(ctx context.Context, ws string) error {
		co, err := relay.Clone(ctx, port.CloneRequest{RunID: "run-42", URL: "https://github.com/acme/widgets.git", WorkspaceDir: ws})
		if err != nil {
			return err
		}
		// ... the agent runs with ws mounted at /workspace and commits on co.Branch ...
		policy := port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}, NoSubmodules: true}
		exp, err := relay.Export(ctx, port.ExportRequest{RunID: "run-42", Checkout: *co, WorkspaceDir: ws, Image: "agent:latest", Policy: policy})
		if err != nil || exp.Empty() {
			return err
		}
		res, err := relay.Push(ctx, port.PushRequest{Export: *exp, Policy: policy}) // to agent/run-42
		if err != nil {
			return err
		}
		fmt.Println(res.Branch, res.Tip, len(res.Commits))
		return nil
	}
	_ = run
}
