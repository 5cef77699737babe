package sandboxbridge_test

import (
	"context"
	"fmt"

	"github.com/agentsandbox/sandbox/cmd/sandbox-bridge/internal/sandboxbridge"
)

// Run as a sandbox's entrypoint does it: listen, forward to the proxy's socket, run the
// agent, and hand back its exit code. (In a sandbox Listen is the default
// 127.0.0.1:8080; port 0 keeps the example from clashing with anything.)
func ExampleRun() {
	code, err := sandboxbridge.Run(context.Background(), sandboxbridge.Config{
		Listen: "127.0.0.1:0",
		Socket: sandboxbridge.DefaultSocket,
		Argv:   []string{"sh", "-c", "echo agent running; exit 3"},
	})
	fmt.Println("exit code:", code, "error:", err)
	// Output:
	// agent running
	// exit code: 3 error: <nil>
}
