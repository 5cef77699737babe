package initenv

import (
	"slices"
	"testing"
)

// TestFilter: the spec's names and PATH, HOME and HOSTNAME are kept, in order;
// the orchestrator's variables and a name's prefix are not.
func TestFilter(t *testing.T) {
	environ := []string{"NOMAD_ALLOC_ID=a", "PATH=/bin", "KUBERNETES_SERVICE_HOST=10.0.0.1", "TOKEN=x", "HOME=/home/u", "TOKEN2=y", "HOSTNAME=h", "EMPTY="}
	got := filter(environ, "TOKEN,,EMPTY")
	want := []string{"PATH=/bin", "TOKEN=x", "HOME=/home/u", "HOSTNAME=h", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Errorf("filter = %q, want %q", got, want)
	}
	if got := filter(environ, ""); !slices.Equal(got, []string{"PATH=/bin", "HOME=/home/u", "HOSTNAME=h"}) {
		t.Errorf("no names: %q", got)
	}
}
