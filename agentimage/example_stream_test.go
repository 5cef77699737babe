package agentimage_test

import (
	"context"
	"fmt"
	"io"

	"github.com/agentsandbox/sandbox/agentimage"
)

// Stream an image's archive into a runner without holding it in memory, and run the
// agent with arguments of its own (Command keeps the interpreter and script).
func ExampleImage_Open() {
	ctx := context.Background()
	img, err := agentimage.Node(ctx, agentimage.NodeApp{Name: "example.com/node-agent", Dir: "./agent", Entry: "agent.mjs"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, archive, err := img.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer archive.Close()
	// Then: runner.LoadImage(ctx, archive), and a run with
	// RunSpec{Image: ref, Argv: img.Command("--task", "summarise")}.
	_, _ = io.Copy(io.Discard, archive)
	fmt.Println(ref != "", img.Command("--task", "summarise")[2:])
}
