package nomad

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// TestTargets: a nomad:// target's address, namespace and region reach the runner
// with the host's owner, runtime and bridge, the init is built and given to it, and
// no cluster is asked anything; a target with a path or an unknown query, a bad
// runtime name or a load= runtime that is not registered is refused.
func TestTargets(t *testing.T) {
	ctx := context.Background()
	rt, err := port.OpenRuntime(ctx, "nomad://127.0.0.1:1?namespace=agents&region=eu", port.RuntimeConfig{Owner: "targets", Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	r := rt.(*Runner)
	if c := r.cfg; c.address != "http://127.0.0.1:1" || c.namespace != "agents" || c.region != "eu" || c.owner != "targets" || c.runtime != "runsc" || c.initPath == "" || c.images.Loader != nil {
		t.Errorf("config from the target: %+v", c)
	}
	rt2, err := port.OpenRuntime(ctx, "nomad://", port.RuntimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if c := rt2.(*Runner).cfg; c.address != "" || c.namespace != "" || c.region != "" || c.owner != port.DefaultOwner {
		t.Errorf("nomad:// takes the environment's address and the defaults: %+v", c)
	}
	for target, want := range map[string]string{
		"nomad://127.0.0.1:4646/v1":            "has a path",
		"nomad://127.0.0.1:4646?kubeconfig=x":  `unknown query parameter "kubeconfig"`,
		"nomad://127.0.0.1:4646?runtime=r u n": "runtime",
	} {
		if _, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{}); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
	}
	if _, err := port.OpenRuntime(ctx, "nomad://127.0.0.1:4646?load=nosuch%3A%2F%2F", port.RuntimeConfig{}); err == nil || !strings.Contains(err.Error(), "load=nosuch://") {
		t.Errorf("a load= runtime that is not registered: %v", err)
	}
}

// fakeLoader records what it loads.
type fakeLoader struct{ got string }

func (f *fakeLoader) LoadImage(_ context.Context, r io.Reader) ([]string, error) {
	b, err := io.ReadAll(r)
	f.got = string(b)
	return []string{"loaded:1"}, err
}

// TestImageLoader: LoadImage goes through the loader WithImageLoader gave, is
// ErrUnsupported saying what to do without one, a nil loader is refused, and Close
// closes the loader a target opened.
func TestImageLoader(t *testing.T) {
	ctx := context.Background()
	if _, err := NewRunner(WithImageLoader(nil)); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "nomad: image loader is nil") {
		t.Errorf("a nil loader: %v", err)
	}
	r, err := NewRunner()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, strings.NewReader("x")); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "load=docker://") {
		t.Errorf("no loader: %v", err)
	}
	f := &fakeLoader{}
	if r, err = NewRunner(WithImageLoader(f)); err != nil {
		t.Fatal(err)
	}
	if names, err := r.LoadImage(ctx, strings.NewReader("archive")); err != nil || len(names) != 1 || names[0] != "loaded:1" || f.got != "archive" {
		t.Errorf("LoadImage = %v, %v; the loader got %q", names, err, f.got)
	}
	closed := 0
	r.cfg.images.Opened = func() error { closed++; return nil }
	if err := r.Close(); err != nil || closed != 1 {
		t.Errorf("Close = %v, closed the opened loader %d times", err, closed)
	}
}
