package docker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/port"
)

// A sandboxed command: no network, no capabilities, read-only root, user 1001, 256 pids,
// a memory limit and a time limit. A non-zero exit is a result, not an error.
func ExampleRunner_RunOnce() {
	r, err := docker.NewRunner(docker.WithOwner("my-service"))
	if err != nil {
		panic(err)
	}
	defer r.Close()

	res, err := r.RunOnce(context.Background(), port.RunSpec{
		RunID:        "run-42",
		Image:        "agentsandbox/testagent:latest",
		Argv:         []string{"/agent", "id"},
		WorkspaceDir: "/srv/runs/run-42",
		Limits:       port.Limits{Timeout: time.Minute, MemoryBytes: 256 << 20},
	})
	switch {
	case errors.Is(err, port.ErrTimeout), errors.Is(err, port.ErrOOMKilled):
		fmt.Println("stopped:", res.ErrorCode)
	case err != nil:
		fmt.Println("failed:", err)
	default:
		fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
	}
}

// Removing what a crashed host left behind: everything of this owner older than an hour.
func ExampleRunner_Sweep() {
	r, err := docker.NewRunner(docker.WithOwner("my-service"))
	if err != nil {
		panic(err)
	}
	rep, err := r.Sweep(context.Background(), port.SweepOptions{OlderThan: time.Hour})
	if err != nil {
		panic(err)
	}
	fmt.Println("removed", rep.Removed)
}
