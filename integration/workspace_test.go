package integration

import (
	"testing"

	"github.com/agentsandbox/sandbox"
)

// newWorkspace is a workspace the default sandbox user can use, removed after the test.
func newWorkspace(t testing.TB) string {
	t.Helper()
	w, err := sandbox.NewWorkspace("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Remove(); err != nil {
			t.Errorf("removing the workspace: %v", err)
		}
	})
	return w.Dir()
}
