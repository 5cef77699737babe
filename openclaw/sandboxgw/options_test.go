package sandboxgw

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
		"no runner":                func(o *Options) { o.Runner = nil },
		"no router":                func(o *Options) { o.Router = nil },
		"no image":                 func(o *Options) { o.Image = "" },
		"relative dir":             func(o *Options) { o.Dir = "gw" },
		"no models":                func(o *Options) { o.Models = nil },
		"bridge port":              func(o *Options) { o.Port = 8080 },
		"short token":              func(o *Options) { o.Token = "short" },
		"bad run id":               func(o *Options) { o.RunID = "../x" },
		"writable mount":           func(o *Options) { o.Mounts = []port.Mount{{Source: "/a", Target: "/b", Writable: true}} },
		"egress without providers": func(o *Options) { o.Egress = &port.EgressPolicy{} },
		"egress creds without source": func(o *Options) {
			o.Egress = &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}, Credentials: []string{"t"}}}}
		},
		"egress options without policy": func(o *Options) { o.EgressUpstreamRoots = []byte("x") },
	} {
		o := good()
		mut(&o)
		if err := o.check(); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}

// A policy whose URIs do not compile is refused before anything listens.
func TestStartRefusesBadEgressURI(t *testing.T) {
	router, err := billing.NewRouter("http://127.0.0.1:9", "k")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = Start(context.Background(), Options{Runner: nopRunner{}, Router: router, Image: "img", Command: []string{"node"}, Dir: dir,
		Models: []openclaw.Model{{ID: "m", ContextWindow: 1000, MaxTokens: 100}},
		Egress: &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "ip", URIs: []string{"https://10.0.0.1/"}}}}})
	if !errors.Is(err, port.ErrInvalidSpec) {
		t.Fatalf("Start with an IP-literal egress URI: %v, want ErrInvalidSpec", err)
	}
	if _, err := os.Stat(filepath.Join(dir, sockDir, port.EgressSocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("egress socket left behind: %v", err)
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
