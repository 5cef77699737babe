package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// recordingReconciler remembers every reconciled run.
type recordingReconciler struct{ runs []string }

func (r *recordingReconciler) Reconcile(_ context.Context, req port.ReconcileRequest) (*port.Reconciliation, error) {
	r.runs = append(r.runs, req.RunID)
	return &port.Reconciliation{Total: port.Usage{Calls: len(req.Calls)}}, nil
}

func TestHibernateAndResumeWithFakes(t *testing.T) {
	r := &fakeSessionRunner{}
	p := &fakeProxy{audit: []port.AuditRecord{{RunID: "run-1", CallID: "c1", RequestID: "r1", Status: 200}}}
	rec := &recordingReconciler{}
	sb := llmSandbox(t, r, p, WithReconciler(rec))
	store, err := NewHibernationStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req := request(t)
	sess, err := sb.Start(context.Background(), SessionRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(req.WorkspaceDir, "notes"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(req.WorkspaceDir, "link")); err != nil {
		t.Fatal(err)
	}
	h, res, err := sess.Hibernate(context.Background(), HibernateOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Segments) != 1 || res.Segments[0].RunID != "run-1" || res.Segments[0].Usage != nil || h.Saved.SkippedCount != 1 {
		t.Fatalf("segments %+v, saved %+v", res.Segments, h.Saved)
	}
	if len(rec.runs) != 0 {
		t.Fatalf("reconciled %v without Reconcile", rec.runs)
	}

	// The next segment needs its own run id and an empty workspace.
	again := request(t)
	if _, err := sb.Resume(context.Background(), h, SessionRequest{Request: again}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a segment's run id again: %v", err)
	}
	again.RunID = "run-2"
	if err := os.WriteFile(filepath.Join(again.WorkspaceDir, "already"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Resume(context.Background(), h, SessionRequest{Request: again}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a workspace that is not empty: %v", err)
	}
	if err := os.Remove(filepath.Join(again.WorkspaceDir, "already")); err != nil {
		t.Fatal(err)
	}
	again.Reconcile = true
	prepared := false
	sess2, err := sb.Resume(context.Background(), h, SessionRequest{Request: again}, WithPrepare(func(ws string) error {
		b, err := os.ReadFile(filepath.Join(ws, "notes"))
		prepared = err == nil && string(b) == "kept"
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !prepared {
		t.Error("WithPrepare did not see the restored workspace")
	}
	if _, err := os.Lstat(filepath.Join(again.WorkspaceDir, "link")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a link came back: %v", err)
	}
	res2, err := sess2.Stop(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Both segments, the first reconciled now that a later one asks for it.
	if len(res2.Segments) != 2 || res2.Segments[1].RunID != "run-2" || res2.Segments[1].ResumedFrom != h.ID ||
		res2.Segments[0].Usage == nil || res2.Segments[1].Usage == nil {
		t.Fatalf("segments %+v", res2.Segments)
	}
	if len(rec.runs) != 2 || rec.runs[0] != "run-2" || rec.runs[1] != "run-1" {
		t.Errorf("reconciled %v", rec.runs)
	}
}

func TestHibernateRefusesBadOptionsBeforeStopping(t *testing.T) {
	r := &fakeSessionRunner{}
	sb := llmSandbox(t, r, &fakeProxy{})
	req := request(t)
	req.Mounts = []port.Mount{{Source: t.TempDir(), Target: "/ro"}}
	sess, err := sb.Start(context.Background(), SessionRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := NewHibernationStore(t.TempDir())
	for name, o := range map[string]HibernateOptions{
		"no store":          {},
		"exclude escapes":   {Store: store, Exclude: []string{"../x"}},
		"exclude no mount":  {Store: store, Exclude: []string{"/elsewhere/x"}},
		"read-only mount":   {Store: store, Mounts: []string{"/ro"}},
		"not a mount":       {Store: store, Mounts: []string{"/nope"}},
		"exclude not clean": {Store: store, Exclude: []string{"a//b"}},
	} {
		if _, _, err := sess.Hibernate(context.Background(), o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if fs := sess.sess.(*fakeSession); fs.stops != 0 {
		t.Errorf("a refused hibernation stopped the session %d times", fs.stops)
	}
	if _, err := NewHibernationStore("relative"); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a relative store: %v", err)
	}
	if _, err := store.Open("../x"); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("Open of a bad id: %v", err)
	}
	if _, err := store.Open("hib-none"); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("Open of an unknown id: %v", err)
	}
}

func TestPauseNeedsAPausableSession(t *testing.T) {
	sb := llmSandbox(t, &fakeSessionRunner{}, &fakeProxy{})
	sess, err := sb.Start(context.Background(), SessionRequest{Request: request(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Pause(context.Background(), port.PauseOptions{}); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("Pause: %v", err)
	}
	if err := sess.Resume(context.Background()); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("Resume: %v", err)
	}
	if st := sess.PauseState(); st.Paused {
		t.Errorf("PauseState %+v", st)
	}
}
