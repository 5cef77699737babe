package warmpool

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestAdmit: both runtimes refuse a pool in the same words, and take one with the
// template's time limit dropped and the options' defaults filled in.
func TestAdmit(t *testing.T) {
	ok := Admission{Bridge: true, LateMounts: true, Runtime: "runc", Check: func(port.RunSpec) error { return nil }, DefaultRefill: 2}
	tmpl := port.PoolTemplate{Image: "img", Workspace: true, Limits: port.Limits{Timeout: time.Minute}}

	noBridge := ok
	noBridge.Bridge = false
	if _, _, err := Admit(tmpl, port.PoolOptions{Size: 1}, noBridge); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "need the bridge") {
		t.Errorf("no bridge: %v", err)
	}
	gvisor := ok
	gvisor.LateMounts, gvisor.Runtime = false, "runsc"
	if _, _, err := Admit(tmpl, port.PoolOptions{Size: 1}, gvisor); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "runtime runsc does not see host mounts") {
		t.Errorf("late mounts unseen: %v", err)
	}
	bad := ok
	bad.Check = func(port.RunSpec) error { return port.Invalidf("no") }
	if _, _, err := Admit(tmpl, port.PoolOptions{Size: 1}, bad); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a refused template: %v", err)
	}
	if _, _, err := Admit(tmpl, port.PoolOptions{}, ok); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("size 0: %v", err)
	}
	got, opts, err := Admit(tmpl, port.PoolOptions{Size: 3, RefillBetweenRuns: true}, ok)
	if err != nil || got.Limits.Timeout != 0 || opts.RefillConcurrency != 2 {
		t.Fatalf("admitted %+v %+v, %v", got, opts, err)
	}
	if c := Sized[int](got, opts, nil); c.Key != got.Key() || c.Size != 3 || c.Concurrency != 2 || !c.BetweenRuns {
		t.Errorf("config %+v", c)
	}
}
