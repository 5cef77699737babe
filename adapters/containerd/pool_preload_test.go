package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testimages"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestPoolPreload runs the pre-booted slot suite (sandboxtest.TestPreloadPool) on
// containerd's warm pools with the generic Node.js preloader. About 15 s.
func TestPoolPreload(t *testing.T) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	r, _ := poolEnv(t, testenv.Owner("pool-preload"))
	ctx := r.ns(context.Background())
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestPreloadPool(t, sandboxtest.PreloadHarness{
		Pooler: r, Image: ref, Node: testimages.NodeBinary,
		Leftovers: func(t testing.TB) []string { return ownedLeftovers(t, r) },
	})
}

// TestPoolPreloadEndsWithHost: the ready slots of a host that died stop with their
// pre-booted runtimes (sandboxtest.TestPoolEndsWithHost). About 10 s.
func TestPoolPreloadEndsWithHost(t *testing.T) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	h := poolHostHarness(t, 2)
	r := h.Sweeper.(*Runner)
	ctx := r.ns(context.Background())
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	h.Template = sandboxtest.PreloadTemplate(t, ref, testimages.NodeBinary)
	sandboxtest.TestPoolEndsWithHost(t, h)
}

// TestPoolPreloadDiesBeforeClaim: a ready slot whose pre-booted runtime died counts in
// PreloadFailed, one whose stub was killed only in Failed
// (sandboxtest.TestPreloadDiesBeforeClaim). About 15 s.
func TestPoolPreloadDiesBeforeClaim(t *testing.T) {
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	r, _ := poolEnv(t, testenv.Owner("pool-preload-dies"))
	ctx := r.ns(context.Background())
	ref, archive, err := testimages.NodeArchive(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadImage(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	sandboxtest.TestPreloadDiesBeforeClaim(t, sandboxtest.PreloadHarness{
		Pooler: r, Image: ref, Node: testimages.NodeBinary,
		Leftovers: func(t testing.TB) []string { return ownedLeftovers(t, r) },
		KillReady: func(pl port.Pool, runtime bool) error {
			p := pl.(*Pool)
			s := <-p.ready
			defer func() { p.ready <- s }()
			pid := int(s.task.Pid())
			if runtime {
				kids := testenv.Children(pid)
				if len(kids) != 1 {
					return fmt.Errorf("the stub %d has children %v, want its runtime alone", pid, kids)
				}
				pid = kids[0]
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return err
			}
			// The exit delivered on the slot's wait channel (buffered: len shows it).
			for end := time.Now().Add(time.Minute); len(s.statusC) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(end) {
					return errors.New("the slot never ended")
				}
			}
			return nil
		},
	})
}
