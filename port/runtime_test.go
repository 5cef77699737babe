package port_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// fakeDriver records what it was opened with; detect is its Detect's answer.
type fakeDriver struct {
	detect error
	opened *url.URL
	cfg    port.RuntimeConfig
}

type fakeRuntime struct{ port.SandboxRunner }

func (fakeRuntime) Ping(context.Context) error { return nil }
func (fakeRuntime) Close() error               { return nil }
func (fakeRuntime) LoadImage(context.Context, io.Reader) ([]string, error) {
	return nil, nil
}

func (d *fakeDriver) Open(_ context.Context, u *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	if _, err := port.TargetQuery(u, "namespace"); err != nil {
		return nil, err
	}
	d.opened, d.cfg = u, cfg
	return fakeRuntime{}, nil
}

func (d *fakeDriver) Detect(context.Context, *url.URL) (port.RuntimeInfo, error) {
	return port.RuntimeInfo{Address: "here"}, d.detect
}

// The test binary's drivers: the two local schemes the empty target tries first,
// and a cluster that is never detected.
var (
	fakeDocker     = &fakeDriver{}
	fakeContainerd = &fakeDriver{}
	fakeCluster    = &fakeDriver{detect: fmt.Errorf("%w: a cluster", port.ErrUnsupported)}
)

func init() {
	port.RegisterRuntime("docker", fakeDocker)
	port.RegisterRuntime("containerd", fakeContainerd)
	port.RegisterRuntime("acluster", fakeCluster)
}

func TestRegisterRuntimeRefusesMistakes(t *testing.T) {
	for name, f := range map[string]func(){
		"twice":      func() { port.RegisterRuntime("docker", &fakeDriver{}) },
		"nil":        func() { port.RegisterRuntime("other", nil) },
		"bad scheme": func() { port.RegisterRuntime("Dock er", &fakeDriver{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	if got := strings.Join(port.RuntimeDrivers(), ","); got != "acluster,containerd,docker" {
		t.Errorf("RuntimeDrivers() = %s", got)
	}
}

func TestOpenRuntime(t *testing.T) {
	ctx := context.Background()
	if _, err := port.OpenRuntime(ctx, "containerd:///run/c.sock?namespace=ns&runtime=runsc", port.RuntimeConfig{Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	if fakeContainerd.opened.Path != "/run/c.sock" || fakeContainerd.opened.RawQuery != "namespace=ns" || fakeContainerd.cfg.Runtime != "runsc" || fakeContainerd.cfg.Owner != "o" {
		t.Errorf("opened %v with %+v: want the path, the query without runtime=, and the runtime in the config", fakeContainerd.opened, fakeContainerd.cfg)
	}
	for target, want := range map[string]string{
		"podman://":                               "import github.com/agentsandbox/sandbox/adapters/podman",
		"docker://user:secret@host:2375":          "credentials never go in a target",
		"docker://?runtime=runc&runtime=runsc":    "runtime= must name one",
		"docker://?runtime=":                      "runtime= must name one",
		"containerd://?namespace=a&sock=b":        `unknown query parameter "sock" (known: runtime, namespace)`,
		"containerd://?namespace=a&namespace=b":   `"namespace" given 2 times`,
		"/var/run/docker.sock":                    "is not scheme://",
		"docker:relative":                         "is not scheme://",
		"docker://%zz":                            "does not parse",
		"docker://?runtime=runsc&namespace=other": "", // checked below: the config's runtime disagrees
	} {
		cfg := port.RuntimeConfig{}
		if want == "" {
			cfg.Runtime, want = "runc", "says runtime=runsc, the configuration runc"
		}
		_, err := port.OpenRuntime(ctx, target, cfg)
		if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", target, err, want)
		}
		if strings.Contains(fmt.Sprint(err), "secret") {
			t.Errorf("%s: the error shows the password: %v", target, err)
		}
	}
}

// An empty target picks the first local runtime that answers: Docker, then
// containerd; a cluster never. When none answers, the error says what each said.
func TestOpenRuntimeEmptyTargetDetects(t *testing.T) {
	ctx := context.Background()
	defer func() { fakeDocker.detect, fakeContainerd.detect = nil, nil }()
	fakeDocker.opened, fakeContainerd.opened = nil, nil
	if _, err := port.OpenRuntime(ctx, "", port.RuntimeConfig{Runtime: "crun"}); err != nil || fakeDocker.opened == nil || fakeDocker.cfg.Runtime != "crun" {
		t.Fatalf("both answer: %v, docker opened %v with %+v", err, fakeDocker.opened, fakeDocker.cfg)
	}
	fakeDocker.detect = errors.New("docker is down")
	if _, err := port.OpenRuntime(ctx, "", port.RuntimeConfig{}); err != nil || fakeContainerd.opened == nil {
		t.Fatalf("docker down: %v, containerd opened %v", err, fakeContainerd.opened)
	}
	fakeContainerd.detect = errors.New("containerd is down")
	fakeCluster.opened = nil
	_, err := port.OpenRuntime(ctx, "", port.RuntimeConfig{})
	if !errors.Is(err, port.ErrUnavailable) || !strings.Contains(err.Error(), "docker: docker is down") || !strings.Contains(err.Error(), "containerd: containerd is down") || fakeCluster.opened != nil {
		t.Errorf("none answers: %v (cluster opened: %v)", err, fakeCluster.opened)
	}
}
