package warmpool

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/runner/runlease"
	"github.com/agentsandbox/sandbox/port"
)

// TestClaimOfPreloadedSlot: a claim in a pre-booted slot starts its result as
// pre-booted with the stub's attestation, holds the run's lease, names the sandbox
// beside the run, builds the claim line from the image's argv and sends the slot's
// output to the run's buffers; the stub's notice that the runtime was gone makes it
// a run to retry cold, its lease given up; a command the runtime lacks is its
// EntrypointError.
func TestClaimOfPreloadedSlot(t *testing.T) {
	p := &Pool[*fakeSlot, int]{tmpl: port.PoolTemplate{Image: "img", Preload: &port.Preload{Argv: []string{"boot"}}}, engine: "fake", owner: "warmpool-test"}
	att := &port.Attestation{}
	s := &Slot{Dir: t.TempDir(), Stdout: &SwitchWriter{}, Stderr: &SwitchWriter{}, Attestation: att}
	spec := port.RunSpec{RunID: "warmpool-claim-test", Image: "img"}.WithDefaults()
	c := p.claim(spec, s)
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if c.Res.Start != port.StartPreloaded || c.Res.PreloadAttestation != att || c.Res.ExitCode != -1 {
		t.Fatalf("claim's result at its start: %+v", c.Res)
	}

	var wasNamed bool
	msg, failed, err := c.Begin(func() { wasNamed = true }, []string{"/agent", "run"}, []string{"A=1"}, "/w")
	if failed != nil || err != nil {
		t.Fatalf("Begin: %+v, %v", failed, err)
	}
	t.Cleanup(s.ReleaseLeases)
	c.named.Wait()
	if !wasNamed {
		t.Error("the sandbox was not named after the run")
	}
	if !runlease.Held(runlease.DefaultRoot(), "warmpool-test", spec.RunID) {
		t.Error("the run's lease is not held")
	}
	if !strings.Contains(string(msg), `"/agent"`) || !strings.Contains(string(msg), `"A=1"`) {
		t.Errorf("the claim line has not the image's argv and the env: %s", msg)
	}

	// What the stub says now is the run's.
	_, _ = io.WriteString(s.Stdout, "out\n")
	_, _ = io.WriteString(s.Stderr, bridgeapi.PreloadGone+"the runtime exited\n")
	c.Collected()
	if string(c.Res.Stdout) != "out\n" {
		t.Errorf("stdout = %q", c.Res.Stdout)
	}
	if _, gone := c.PreloadGone(); gone {
		t.Error("a run that did not end with the bridge's failure code counted as gone")
	}
	c.Res.ExitCode = bridgeapi.ExitBridgeFailed
	gone, ok := c.PreloadGone()
	if !ok || gone.Gone != "the runtime exited" || gone.RunResult != c.Res {
		t.Fatalf("PreloadGone = %+v, %v", gone, ok)
	}
	if runlease.Held(runlease.DefaultRoot(), "warmpool-test", spec.RunID) {
		t.Error("the run's lease is still held for the cold run that follows")
	}

	missing := errors.New(bridgeapi.ErrCommandNotFound.Error() + ": openclaw: no such file")
	var entry *port.EntrypointError
	if err := c.MissingEntry(port.CodeContainerFailed, missing); !errors.As(err, &entry) || entry.Entry != "openclaw" {
		t.Errorf("MissingEntry = %v", err)
	}
	if err := c.MissingEntry(port.CodeInternal, missing); err != missing {
		t.Errorf("MissingEntry of another failure = %v", err)
	}
	res, err := c.Fail(port.CodeTimeout, errors.New("late"))
	if res.ErrorCode != port.CodeTimeout || !strings.HasPrefix(err.Error(), "fake.RunOnce") {
		t.Errorf("Fail = %+v, %v", res.RunResult, err)
	}
}
