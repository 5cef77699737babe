package sandboxtest_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// An adapter's test runs the runner suite: build and load the probe image, then hand
// the suite the runner and a way to list what the adapter holds for a run.
func ExampleTestRunner() {
	// In a test function: func TestConformance(t *testing.T) { ... }
	var t *testing.T
	ctx := context.Background()
	ref, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := docker.NewRunner(docker.WithOwner("conformance"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestRunner(t, sandboxtest.RunnerHarness{
		Runner: r,
		Image:  ref,
		Leftovers: func(ctx context.Context, runID string) ([]string, error) {
			// The adapter's own listing: every container, volume or directory it still
			// holds for runID (by the port.LabelRunID label). The suite requires none
			// after each run; integration/outside_test.go has Docker's.
			return nil, nil
		},
	})
}
