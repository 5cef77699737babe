package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// launched is a runtime's session handle as Launch sees it.
type launched struct {
	port.Session // not called by Launch
	h            *Handle
}

func (l *launched) Ready(ctx context.Context, halt func()) error { return l.h.Ready(ctx, halt) }

// TestLaunch: every step sees the name Check gave (a runtime's names are random:
// asking again gives another), and a start that fails after Create removes the
// sandbox and the session's directory, in a *port.OpError of the runner's op.
func TestLaunch(t *testing.T) {
	root := t.TempDir()
	ss := port.SessionSpec{RunSpec: port.RunSpec{RunID: "s1", Image: "img", Limits: port.Limits{Timeout: time.Hour}}}
	var created, removed, started string
	var got *launched
	steps := func(startErr error) Steps[*launched] {
		return Steps[*launched]{
			Op: "fake.Start", Root: root, Owner: "own", Bridge: true,
			Check: func(_ context.Context, ss *port.SessionSpec) (string, error) {
				ss.Image = "resolved"
				return "agentsandbox-s1-" + time.Now().Format("150405.000000000"), nil
			},
			Create: func(_ context.Context, ss port.SessionSpec, st Setup) error {
				if ss.Image != "resolved" {
					t.Errorf("Create got image %q, want the one Check resolved", ss.Image)
				}
				created = st.Name
				return nil
			},
			Remove: func(_ context.Context, st Setup) { removed = st.Name },
			Start: func(_ context.Context, ss port.SessionSpec, st Setup) (*launched, error) {
				started = st.Name
				if startErr != nil {
					return nil, startErr
				}
				got = &launched{h: NewHandle(st.Meta(st.Name, ss), nil)}
				return got, nil
			},
			Halt: func(l *launched) { l.h.Halt(errors.New("halted")) },
		}
	}
	s, err := Launch(context.Background(), ss, steps(nil))
	if err != nil || s != port.Session(got) {
		t.Fatalf("Launch = %v, %v", s, err)
	}
	defer got.h.Detach()
	if created == "" || started != created || got.h.ID() != created || filepath.Base(got.h.Dir) != created {
		t.Errorf("created %q, started %q, handle %q in %q: one name for all", created, started, got.h.ID(), got.h.Dir)
	}
	if removed != "" {
		t.Errorf("a started session's sandbox was removed (%q)", removed)
	}

	created, started = "", ""
	boom := errors.New("boom")
	s, err = Launch(context.Background(), ss, steps(boom))
	var oe *port.OpError
	if s != nil || !errors.Is(err, boom) || !errors.As(err, &oe) || oe.Op != "fake.Start" || oe.RunID != "s1" {
		t.Fatalf("a failed start: %v, %v", s, err)
	}
	if removed == "" || removed != created {
		t.Errorf("removed %q after creating %q", removed, created)
	}
	if _, err := os.Stat(filepath.Join(root, created)); !os.IsNotExist(err) {
		t.Errorf("the failed session's directory is still there: %v", err)
	}
	if _, err := Launch(context.Background(), ss, Steps[*launched]{Op: "fake.Start"}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("no bridge: %v", err)
	}
}
