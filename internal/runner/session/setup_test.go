package session

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestCheckNeedsTheBridge: every runner refuses a session without the bridge in the
// same words, after the spec's own checks.
func TestCheckNeedsTheBridge(t *testing.T) {
	ss := port.SessionSpec{RunSpec: port.RunSpec{RunID: "s1", Image: "img"}}
	if _, err := Check(ss, false); !errors.Is(err, port.ErrInvalidSpec) || err.Error() != "invalid spec: sessions need the runner's bridge (WithBridge)" {
		t.Errorf("no bridge: %v", err)
	}
	got, err := Check(ss, true)
	if err != nil || got.LogLimit == 0 || got.Limits.Timeout == 0 {
		t.Errorf("with the bridge: %+v, %v (want the defaults filled in)", got, err)
	}
	if _, err := Check(port.SessionSpec{}, true); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("an empty spec: %v", err)
	}
}

// TestPrepare: the session's directory exists under the root, its deadline is its
// lifetime from now, and its sandbox's labels carry owner, run, kind and the
// session's own.
func TestPrepare(t *testing.T) {
	root := t.TempDir()
	ss, err := Check(port.SessionSpec{RunSpec: port.RunSpec{RunID: "s1", Image: "img", Limits: port.Limits{Timeout: time.Hour}}, Expose: []int{8080}}, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Prepare(root, "agentsandbox-s1", "own", ss)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(st.Dir); err != nil || !fi.IsDir() || !strings.HasPrefix(st.Dir, root+"/") || st.Root != root {
		t.Fatalf("dir %q under %q: %v", st.Dir, root, err)
	}
	if d := st.Deadline.Sub(st.Start); d != time.Hour {
		t.Errorf("deadline %v after the start, want 1h", d)
	}
	for k, want := range map[string]string{port.LabelOwner: "own", port.LabelRunID: "s1", port.LabelKind: port.KindSession,
		port.LabelSessionDir: st.Dir, port.LabelExpose: "8080"} {
		if st.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, st.Labels[k], want)
		}
	}
	if m := st.Meta("cid", ss); m.ID != "cid" || m.Dir != st.Dir || !m.Deadline.Equal(st.Deadline) || len(m.Ports) != 1 {
		t.Errorf("meta %+v", m)
	}
	if _, err := Prepare(root, "bad name", "own", ss); !errors.Is(err, port.ErrInternal) && !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a bad name: %v", err)
	}
	if Root("") != DefaultRoot() || Root("/x") != "/x" {
		t.Error("Root")
	}
}
