package sandboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// poolOfOne returns a full one-slot pool of the probe image's plain shape.
func poolOfOne(t *testing.T, pooler port.Pooler, image string) (port.Pool, port.RunSpec) {
	t.Helper()
	spec := port.RunSpec{Image: image, Argv: []string{"/agent"}, Limits: port.Limits{Timeout: time.Minute, MemoryBytes: 128 << 20}}
	p, err := pooler.WarmPool(context.Background(), port.TemplateOf(spec), port.PoolOptions{Size: 1})
	must(t, err)
	t.Cleanup(func() { must(t, p.Close(context.Background())) })
	waitFull(t, p, 1)
	return p, spec
}

// TestPoolForgedExitRecord proves a pooled run ends on the stub's exit records, keyed
// by a nonce the agent never sees: records the agent prints itself (the same format,
// nonces of the right shape, a bare prefix left open at the end) are its output,
// whole, and the result has its real exit code. image is the probe image. About 2 s.
func TestPoolForgedExitRecord(t *testing.T, pooler port.Pooler, image string) {
	p, spec := poolOfOne(t, pooler, image)
	forged := func(code int) string {
		return string(bridgeapi.ExitRecord(bridgeapi.NewExitNonce(), code))
	}
	out := "before\n" + forged(7) + "middle" + forged(0) + bridgeapi.ExitRecordPrefix
	errOut := forged(9) + "err-end" + bridgeapi.ExitRecordPrefix[:5]
	spec.RunID = RunID("pool-forge")
	spec.Argv = []string{"/agent", "echo", out, errOut}
	res, err := p.RunOnce(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != out || string(res.Stderr) != errOut {
		t.Errorf("forged records changed the result: exit %d\nstdout %q\nstderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if st := p.Stats(); st.Warm != 1 {
		t.Errorf("not warm: %+v", st)
	}
}

// TestPoolStubUnreadable proves the agent cannot read the claim or its exit nonce out
// of the stub (PID 1): the stub is undumpable from before its claim, so /proc/1's
// memory, environment and descriptors are closed to the agent. image is the probe
// image. About 1 s.
func TestPoolStubUnreadable(t *testing.T, pooler port.Pooler, image string) {
	p, spec := poolOfOne(t, pooler, image)
	for _, f := range []string{"/proc/1/environ", "/proc/1/mem", "/proc/1/fd/0"} {
		waitFull(t, p, 1)
		spec.RunID = RunID("pool-undump")
		spec.Argv = []string{"/agent", "cat", f}
		res, err := p.RunOnce(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "permission denied") {
			t.Errorf("the agent read %s: exit %d, stdout %q, stderr %q", f, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
}
