package agentimage_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentsandbox/sandbox/agentimage"
)

// Package a Go agent and get the archive a runner's LoadImage takes.
func Example() {
	ctx := context.Background()
	bin, err := agentimage.BuildGo(ctx, "github.com/agentsandbox/sandbox/examples/quickstart/agent")
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, archive, err := agentimage.Static("example.com/my-agent", bin).Archive()
	if err != nil {
		fmt.Println(err)
		return
	}
	// Then: runner.LoadImage(ctx, bytes.NewReader(archive)) and RunSpec.Image = ref.
	fmt.Println(strings.HasPrefix(ref, "example.com/my-agent:"), len(archive) > len(bin))
	// Output: true true
}
