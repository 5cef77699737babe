package sandboxgw

import (
	"errors"
	"testing"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/port"
)

type nopRunner struct{ port.SessionRunner }

func TestOptionsCheck(t *testing.T) {
	router, err := billing.NewRouter("http://127.0.0.1:9", "k")
	if err != nil {
		t.Fatal(err)
	}
	good := func() Options {
		return Options{Runner: nopRunner{}, Router: router, Image: "img", Command: []string{"node", "oc.mjs"}, Dir: t.TempDir(),
			Models: []openclaw.Model{{ID: "m", ContextWindow: 1000, MaxTokens: 100}}}
	}
	o := good()
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	if o.Port != DefaultPort || len(o.Token) < 16 || o.RunID == "" || o.Limits.MemoryBytes != DefaultMemoryBytes {
		t.Errorf("defaults not applied: %+v", o)
	}
	for name, mut := range map[string]func(*Options){
		"no runner":      func(o *Options) { o.Runner = nil },
		"no router":      func(o *Options) { o.Router = nil },
		"no image":       func(o *Options) { o.Image = "" },
		"relative dir":   func(o *Options) { o.Dir = "gw" },
		"no models":      func(o *Options) { o.Models = nil },
		"bridge port":    func(o *Options) { o.Port = 8080 },
		"short token":    func(o *Options) { o.Token = "short" },
		"bad run id":     func(o *Options) { o.RunID = "../x" },
		"writable mount": func(o *Options) { o.Mounts = []port.Mount{{Source: "/a", Target: "/b", Writable: true}} },
	} {
		o := good()
		mut(&o)
		if err := o.check(); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestDownErrorIsTyped(t *testing.T) {
	cause := errors.New("sandbox exited with 137")
	var err error = &DownError{RunID: "r1", Cause: cause}
	if !errors.Is(err, ErrGatewayDown) || !errors.Is(err, cause) {
		t.Errorf("%v does not wrap ErrGatewayDown and its cause", err)
	}
	if generationOf("ocgw-abc-12") != 12 {
		t.Error("generationOf")
	}
}
