package docker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/port"
)

// A long-running sandbox: a server on its loopback reached through the exposed
// socket, a command run beside it, then stopped.
func ExampleRunner_Start() {
	ctx := context.Background()
	r, err := docker.NewRunner(docker.WithBridge("/usr/local/lib/agentsandbox/bridge"))
	if err != nil {
		panic(err)
	}
	var runner port.SandboxRunner = r
	sr, ok := runner.(port.SessionRunner) // an optional capability
	if !ok {
		panic("no sessions on this runner")
	}
	sess, err := sr.Start(ctx, port.SessionSpec{
		RunSpec: port.RunSpec{RunID: "svc-1", Image: "example/server:latest", Argv: []string{"/server", "-listen", "127.0.0.1:7000"}},
		Expose:  []int{7000},
	})
	if err != nil {
		panic(err)
	}
	defer sess.Stop(ctx, 10*time.Second)
	conn, err := sess.Dial(ctx, 7000) // never follows a link planted in the socket's directory
	if err == nil {
		conn.Close()
	}
	res, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/server", "-healthcheck"}, Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.ExitCode)
}
