package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestExitFailure: a session's exit is classified as a run's, in one order for every
// runtime: a command the bridge could not start, a sandbox removed from under the
// session, the memory limit; the host's own stop is no failure of the agent's, and
// the runtime's witnesses are asked only for a kill's 137.
func TestExitFailure(t *testing.T) {
	handle := func(stderr string) *Handle {
		dir, _, errw := testLog(t, 1<<16)
		if _, err := errw.Write([]byte(stderr)); err != nil {
			t.Fatal(err)
		}
		h := NewHandle(Meta{ID: "c1", RunID: "s1", Dir: dir, LogLimit: 1 << 16}, nil)
		t.Cleanup(func() { _ = h.Detach() })
		return h
	}
	yes := func() bool { return true }
	never := func() bool { t.Error("a witness asked for an exit that is no kill"); return false }
	cannot := "agent output\n" + bridgeapi.ExecFailedPrefix + "exec: \"nope\": not found\n"
	for _, c := range []struct {
		name               string
		stderr             string
		code               int
		stopping           bool
		removed, oomKilled func() bool
		want               port.ErrorCode
		cause              string
	}{
		{"cannot start", cannot, bridgeapi.ExitNotFound, false, never, never, port.CodeContainerFailed, `exec: "nope": not found`},
		{"cannot start, stopping", cannot, bridgeapi.ExitNotFound, true, never, never, "", ""},
		{"own exit", "", 3, false, never, never, "", ""},
		{"removed", "", 137, false, yes, never, port.CodeInternal, "removed while it ran (exit 137"},
		{"stopped", "", 137, true, never, nil, "", ""},
		{"oom notice", bridgeapi.OOMNotice, 137, false, func() bool { return false }, nil, port.CodeOOMKilled, "memory limit reached"},
		{"oom witness", "", 137, true, never, yes, port.CodeOOMKilled, "memory limit reached"},
	} {
		got, cause := handle(c.stderr).ExitFailure(c.code, c.stopping, c.removed, c.oomKilled)
		if got != c.want || (c.cause == "") != (cause == nil) || (cause != nil && !strings.Contains(cause.Error(), c.cause)) {
			t.Errorf("%s: %q, %v; want %q, %q", c.name, got, cause, c.want, c.cause)
		}
		if c.want == port.CodeInternal && !errors.Is(cause, port.ErrRemoved) {
			t.Errorf("%s: %v is not port.ErrRemoved", c.name, cause)
		}
	}
}
