package docker

import (
	"context"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestMemoryReported: a run's result carries its memory cgroup's data, sampled by the
// host while it ran: the limit the run asked for, a peak, and samples. About 2 s.
func TestMemoryReported(t *testing.T) {
	cli, image := dockerEnv(t)
	r, err := NewRunner(WithClient(cli), WithOwner("memtest"), WithBridge(testenv.Bridge(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("mem"), Image: image, Argv: []string{"/agent", "sleep", "2"},
		Limits: port.Limits{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Memory
	if m == nil || m.LimitBytes != 64<<20 || m.PeakBytes == 0 || m.PeakBytes > m.LimitBytes || m.Samples < 2 || m.OOMKills != 0 {
		t.Fatalf("memory %+v", m)
	}
	if m.Thrashing(res.Duration) {
		t.Errorf("a sleeping probe reported as thrashing: %v", m)
	}
}

// TestPoolMemoryReported: a pooled run reports its memory as a cold one does
// (sandboxtest.TestPoolMemory). About 5 s.
func TestPoolMemoryReported(t *testing.T) {
	r, _, image := poolEnv(t, testenv.Owner("poolmem"))
	sandboxtest.TestPoolMemory(t, r, image)
}

// TestPoolRefillBetweenRuns: a pool refilling between runs creates nothing while its
// run is in progress (sandboxtest.TestPoolRefillBetweenRuns). About 5 s.
func TestPoolRefillBetweenRuns(t *testing.T) {
	r, _, image := poolEnv(t, testenv.Owner("poolrefill"))
	sandboxtest.TestPoolRefillBetweenRuns(t, r, image)
}
