package sandboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestPoolMemory proves a pooled run reports its own memory cgroup's data, sampled by
// the host from the claim on (port.RunResult.Memory), as a cold run does: a run that
// holds 24 MiB for a second reports the limit, the slot's use when claimed
// (ClaimBytes), a peak at least 20 MiB above that, several samples and no OOM kill or
// limit hit; a run that hogs memory in the next slot is OOM-killed and reports its
// kill. image is the probe image
// (/agent); the pooler must pool a template without workspace. About 5 s.
func TestPoolMemory(t *testing.T, pooler port.Pooler, image string) {
	const limit = 64 << 20
	spec := port.RunSpec{Image: image, Limits: port.Limits{Timeout: 90 * time.Second, MemoryBytes: limit}}
	p, err := pooler.WarmPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	must(t, err)
	defer func() { must(t, p.Close(context.Background())) }()

	waitFull(t, p, 1)
	spec.RunID, spec.Argv = RunID("poolmem"), []string{"/agent", "alloc", "24", "1"}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatalf("alloc: %v %+v", err, res)
	}
	if res.Start != port.StartWarm {
		t.Fatalf("the run started %q (%s), want warm", res.Start, res.StartNote)
	}
	m := res.Memory
	if m == nil || m.LimitBytes != limit || m.ClaimBytes == 0 || m.PeakBytes < m.ClaimBytes+20<<20 || m.PeakBytes > limit ||
		m.Samples < 2 || m.OOMKills != 0 || m.LimitHits != 0 {
		t.Fatalf("a pooled run holding 24 MiB's memory: %+v", m)
	}
	if m.Thrashing(res.Duration) {
		t.Errorf("a pooled run holding 24 MiB reported as thrashing: %v", m)
	}

	waitFull(t, p, 1)
	spec.RunID, spec.Argv = RunID("poolmem-hog"), []string{"/agent", "memhog"}
	res, err = p.RunOnce(context.Background(), spec)
	if !errors.Is(err, port.ErrOOMKilled) || res == nil || res.Start != port.StartWarm {
		t.Fatalf("memhog in a pooled slot: %v %+v", err, res)
	}
	m = res.Memory
	// The kernel's charge can overshoot the limit by a page or so before it kills.
	if m == nil || m.OOMKills < 1 || m.LimitBytes != limit || m.ClaimBytes == 0 || m.PeakBytes > limit+1<<20 {
		t.Fatalf("an OOM-killed pooled run's memory: %+v", m)
	}
}
