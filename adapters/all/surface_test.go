package all_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/agentsandbox/sandbox/adapters/containerd"
	"github.com/agentsandbox/sandbox/adapters/docker"
	"github.com/agentsandbox/sandbox/adapters/kubernetes"
	"github.com/agentsandbox/sandbox/adapters/nomad"
	"github.com/agentsandbox/sandbox/port"
)

// surface is one runtime adapter's exported constructor and common options, as
// values, so their types can be compared.
type surface struct {
	name      string
	newRunner any
	// newWith makes a runner with the adapter's required options plus one of the
	// common options it is given.
	withRuntime, withOwner, withLogger, withBridge any
	open                                           func(runtime string) (port.Runtime, error)
	runtimeOption                                  any // the adapter's Option type, as a nil value
}

func surfaces() []surface {
	kubeBase := []kubernetes.Option{kubernetes.WithConfig(&rest.Config{Host: "http://127.0.0.1:1"}), kubernetes.WithInit("/opt/init")}
	return []surface{
		{"docker", docker.NewRunner, docker.WithRuntime, docker.WithOwner, docker.WithLogger, docker.WithBridge,
			func(rt string) (port.Runtime, error) { return docker.NewRunner(docker.WithRuntime(rt)) }, docker.Option(nil)},
		{"containerd", containerd.NewRunner, containerd.WithRuntime, containerd.WithOwner, containerd.WithLogger, containerd.WithBridge,
			func(rt string) (port.Runtime, error) { return containerd.NewRunner(containerd.WithRuntime(rt)) }, containerd.Option(nil)},
		{"nomad", nomad.NewRunner, nomad.WithRuntime, nomad.WithOwner, nomad.WithLogger, nomad.WithBridge,
			func(rt string) (port.Runtime, error) { return nomad.NewRunner(nomad.WithRuntime(rt)) }, nomad.Option(nil)},
		{"kubernetes", kubernetes.NewRunner, kubernetes.WithRuntime, kubernetes.WithOwner, kubernetes.WithLogger, kubernetes.WithBridge,
			func(rt string) (port.Runtime, error) {
				return kubernetes.NewRunner(append(kubeBase, kubernetes.WithRuntime(rt))...)
			}, kubernetes.Option(nil)},
	}
}

// The four runtime adapters line up: the same constructor shape over one Option
// type each (func(*config) error), the same common options, a Runner that is a
// port.Runtime with the same LoadImage, Ping and Close, and WithRuntime taking the
// same runtime names (and refusing a path) everywhere.
func TestAdaptersHaveTheSameSurface(t *testing.T) {
	errT := reflect.TypeFor[error]()
	for _, s := range surfaces() {
		t.Run(s.name, func(t *testing.T) {
			opt := reflect.TypeOf(s.runtimeOption)
			if opt.Name() != "Option" || opt.Kind() != reflect.Func || opt.NumIn() != 1 || opt.NumOut() != 1 || opt.Out(0) != errT ||
				opt.In(0).Kind() != reflect.Pointer || opt.In(0).Elem().Name() != "config" {
				t.Errorf("Option is %v, want func(*config) error", opt)
			}
			nr := reflect.TypeOf(s.newRunner)
			if !nr.IsVariadic() || nr.NumIn() != 1 || nr.In(0).Elem() != opt || nr.NumOut() != 2 || nr.Out(0).Elem().Name() != "Runner" || nr.Out(1) != errT {
				t.Errorf("NewRunner is %v, want func(...Option) (*Runner, error)", nr)
			}
			runner := nr.Out(0)
			if !runner.Implements(reflect.TypeFor[port.Runtime]()) {
				t.Errorf("%v is not a port.Runtime", runner)
			}
			for name, want := range map[string]reflect.Type{
				"LoadImage": reflect.TypeFor[func(context.Context, io.Reader) ([]string, error)](),
				"Ping":      reflect.TypeFor[func(context.Context) error](),
				"Close":     reflect.TypeFor[func() error](),
				"RunOnce":   reflect.TypeFor[func(context.Context, port.RunSpec) (*port.RunResult, error)](),
			} {
				m, ok := runner.MethodByName(name)
				if !ok {
					t.Errorf("%v has no %s", runner, name)
					continue
				}
				// Drop the receiver.
				in := []reflect.Type{}
				for i := 1; i < m.Type.NumIn(); i++ {
					in = append(in, m.Type.In(i))
				}
				out := []reflect.Type{}
				for i := 0; i < m.Type.NumOut(); i++ {
					out = append(out, m.Type.Out(i))
				}
				if got := reflect.FuncOf(in, out, false); got != want {
					t.Errorf("%s is %v, want %v", name, got, want)
				}
			}
			for name, o := range map[string]any{"WithRuntime": s.withRuntime, "WithOwner": s.withOwner, "WithBridge": s.withBridge} {
				if got, want := reflect.TypeOf(o), reflect.FuncOf([]reflect.Type{reflect.TypeFor[string]()}, []reflect.Type{opt}, false); got != want {
					t.Errorf("%s is %v, want %v", name, got, want)
				}
			}
			if got, want := reflect.TypeOf(s.withLogger), reflect.FuncOf([]reflect.Type{reflect.TypeFor[*slog.Logger]()}, []reflect.Type{opt}, false); got != want {
				t.Errorf("WithLogger is %v, want %v", got, want)
			}
			for _, name := range []string{"runc", "runsc", "crun"} {
				rt, err := s.open(name)
				if err != nil {
					t.Errorf("WithRuntime(%q): %v", name, err)
					continue
				}
				if rr, ok := rt.(port.RuntimeReporter); !ok || rr.Runtime() != name {
					t.Errorf("WithRuntime(%q): the runner reports runtime %v", name, rt)
				}
				rt.Close()
			}
			if _, err := s.open("/usr/bin/runc"); !errors.Is(err, port.ErrInvalidSpec) {
				t.Errorf("WithRuntime of a path: %v, want ErrInvalidSpec", err)
			}
		})
	}
}

// Importing adapters/all registers the four schemes.
func TestAllRegistersTheFourSchemes(t *testing.T) {
	if got := port.RuntimeDrivers(); !slices.Equal(got, []string{"containerd", "docker", "kubernetes", "nomad"}) {
		t.Errorf("RuntimeDrivers() = %v", got)
	}
}

// A cluster is never picked by an empty target, and its LoadImage without a
// loader says how to get an image onto the nodes.
func TestClusterLoadImageSaysHow(t *testing.T) {
	ctx := context.Background()
	for _, s := range surfaces()[2:] {
		rt, err := s.open("runc")
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.LoadImage(ctx, strings.NewReader(""))
		if !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "registry") || !strings.Contains(err.Error(), "load=") {
			t.Errorf("%s LoadImage: %v, want ErrUnsupported saying how", s.name, err)
		}
		rt.Close()
		if _, err := port.DetectRuntime(ctx, s.name+"://"); !errors.Is(err, port.ErrUnsupported) {
			t.Errorf("%s Detect: %v, want ErrUnsupported", s.name, err)
		}
	}
}
