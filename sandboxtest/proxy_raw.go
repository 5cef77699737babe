package sandboxtest

import (
	"encoding/json"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// rawAnswer is the rawdump probe's line for one request: its index, the answer's
// bytes as the agent's HTTP client read them, and why there were none.
type rawAnswer struct {
	I   int    `json:"i"`
	Raw string `json:"raw"`
	Err string `json:"err"`
}

// rawAnswers sends reqs from inside a real sandbox of the run named name, through
// a proxy to u (the probe's rawdump command), and gives check each answer to one of
// reqs; it fails t unless every request was answered.
func rawAnswers(t *testing.T, h ProxyHarness, u *upstream, name string, reqs []redTeamRequest, check func(rawAnswer)) {
	t.Helper()
	spec := proxySpec(RunID(name), u)
	p, stop := started(t, h, spec)
	defer stop()
	ws := requestsWorkspace(t, reqs)
	res := h.sandbox(t, p, spec.RunID, ws, "rawdump", port.WorkspacePath+"/reqs.jsonl")
	got := 0
	for _, l := range lines0(res.Stdout) {
		var out rawAnswer
		if err := json.Unmarshal([]byte(l), &out); err != nil || out.I < 0 || out.I >= len(reqs) {
			continue
		}
		got++
		check(out)
	}
	if got != len(reqs) {
		t.Errorf("the probe answered %d of %d requests: exit %d\n%s\n%s", got, len(reqs), res.ExitCode, res.Stdout, res.Stderr)
	}
}
