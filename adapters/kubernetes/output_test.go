package kubernetes

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox/port"
)

func frame(kind string, s string) string {
	return kind + " " + base64.StdEncoding.EncodeToString([]byte(s)) + "\n"
}

// TestOutputDecodesFrames: the streams come apart, the cap holds, a second read of
// the same log (after a broken follow) adds only what is new, and lines that are not
// frames are ignored.
func TestOutputDecodesFrames(t *testing.T) {
	var live bytes.Buffer
	o := newOutput(10, &live, nil)
	first := frame("o", "hello ") + "garbage\n" + frame("e", "oops")
	if err := o.read(strings.NewReader(first)); err != nil {
		t.Fatal(err)
	}
	if o.complete() {
		t.Fatal("complete before the end frame")
	}
	whole := first + frame("o", "world, and more") + "t false false\n"
	if err := o.read(strings.NewReader(whole)); err != nil {
		t.Fatal(err)
	}
	out, errb, to, te := o.result()
	if string(out) != "hello worl" || string(errb) != "oops" || !to || te || !o.complete() {
		t.Errorf("out=%q err=%q trunc=%v,%v", out, errb, to, te)
	}
	if live.String() != "hello worl" {
		t.Errorf("live got %q, want each byte once", live.String())
	}
}

// TestCheckRefusesWhatAPodCannotExpress needs no cluster: the fake clientset is never called.
func TestCheckRefusesWhatAPodCannotExpress(t *testing.T) {
	r, err := NewRunner(WithClient(fake.NewClientset()), WithInit("/opt/init"), WithBridge("/opt/bridge"), WithNodePIDsLimit(128))
	if err != nil {
		t.Fatal(err)
	}
	base := port.RunSpec{RunID: "r1", Image: "img", Argv: []string{"/agent"}}
	for name, c := range map[string]struct {
		mut  func(*port.RunSpec)
		want error
	}{
		"pids below the node's": {func(s *port.RunSpec) { s.Limits.PIDs = 64 }, port.ErrUnsupported},
		"internal network":      {func(s *port.RunSpec) { s.Network.Internal = "n" }, port.ErrUnsupported},
		"socket volume":         {func(s *port.RunSpec) { s.LLM = &port.LLMSocket{Volume: "v"} }, port.ErrUnsupported},
		"no argv":               {func(s *port.RunSpec) { s.Argv = nil }, port.ErrInvalidSpec},
		"root":                  {func(s *port.RunSpec) { s.User = "0" }, port.ErrInvalidSpec},
	} {
		s := base
		c.mut(&s)
		res, err := r.RunOnce(context.Background(), s)
		if !errors.Is(err, c.want) || res != nil {
			t.Errorf("%s: %v, %v; want %v", name, res, err, c.want)
		}
	}
	if _, err := NewRunner(WithClient(fake.NewClientset())); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a runner without its init: %v", err)
	}
	if _, err := NewRunner(WithClient(fake.NewClientset()), WithInit("/i"), WithOwner("bad owner")); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("an owner that is no label value: %v", err)
	}
}

func TestRunLabelIsAlwaysALabelValue(t *testing.T) {
	for _, id := range []string{"r1", "Run_1.x", strings.Repeat("a", 64), "ends-with-dot.", "x-"} {
		if l := runLabel(id); !labelValueRe.MatchString(l) {
			t.Errorf("runLabel(%q) = %q", id, l)
		}
	}
	if runLabel("abc") != "abc" || runLabel("a.") == runLabel("a-") {
		t.Error("runLabel should keep valid IDs and tell others apart")
	}
}

// TestSessionsDeclaredOnlyWhenPossible: a runner on a bare clientset (no REST
// configuration for exec streams) or without host paths does not declare sessions,
// and refuses them with ErrUnsupported before creating anything.
func TestSessionsDeclaredOnlyWhenPossible(t *testing.T) {
	for name, opts := range map[string][]Option{
		"clientset only": {WithClient(fake.NewClientset()), WithBridge("/bridge"), WithInit("/init"), WithRuntimePIDsLimit()},
		"no host paths":  {WithConfig(&rest.Config{Host: "https://127.0.0.1:1"}), WithHostPaths(false), WithBridge("/bridge"), WithInit("/init"), WithRuntimePIDsLimit()},
	} {
		r, err := NewRunner(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if r.RunnerCapabilities().Sessions {
			t.Errorf("%s: sessions declared", name)
		}
		_, err = r.Start(context.Background(), port.SessionSpec{RunSpec: port.RunSpec{RunID: "s1", Image: "img", Argv: []string{"/agent"}}})
		if !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s: Start = %v, want ErrUnsupported", name, err)
		}
		if _, err := r.Attach(context.Background(), "agentsandbox-s1-00000000"); !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s: Attach = %v, want ErrUnsupported", name, err)
		}
	}
	r, err := NewRunner(WithConfig(&rest.Config{Host: "https://127.0.0.1:1"}), WithBridge("/bridge"), WithInit("/init"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.RunnerCapabilities().Sessions {
		t.Error("a runner with a REST configuration and host paths does not declare sessions")
	}
}

func TestWithSessionDirMustBeAbsolute(t *testing.T) {
	if _, err := NewRunner(WithClient(fake.NewClientset()), WithInit("/i"), WithSessionDir("rel/dir")); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a relative session dir: %v, want ErrInvalidSpec", err)
	}
}
