package bridge_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/bridge"
)

// Give a runner the bridge, built once and cached in the user's cache directory.
func ExampleBuild() {
	ctx := context.Background()
	bin, err := bridge.Build(ctx, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	runner, err := docker.NewRunner(docker.WithBridge(bin))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_ = runner // sandbox.New(runner, sandbox.WithLLM(...)), ...
}
