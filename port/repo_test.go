package port_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/port"
)

func TestRepoErrors(t *testing.T) {
	re := &port.RejectError{Rule: port.RuleSymlink, Path: "a/b", Commit: "abc", Detail: "target leaves"}
	err := fmt.Errorf("wrapped: %w", &port.OpError{Op: "gitcli.Export", RunID: "r1", Err: re})
	if !errors.Is(err, port.ErrRejected) || !errors.Is(err, errdefs.ErrRejected) {
		t.Fatal("a RejectError is not ErrRejected")
	}
	if got := err.Error(); !strings.Contains(got, `rejected (symlink) path "a/b" in abc: target leaves`) {
		t.Fatalf("message %q", got)
	}
	pe := &port.PushError{Branch: "agent/r1", Bundle: "/cache/a.bundle", Err: fmt.Errorf("%w: 403", port.ErrPermissionDenied)}
	if !errors.Is(pe, port.ErrPermissionDenied) || !strings.Contains(pe.Error(), "/cache/a.bundle") {
		t.Fatalf("push error %v", pe)
	}
}

func TestRepoPolicyDefaults(t *testing.T) {
	p := port.RepoPolicy{MaxTotalBytes: 1 << 20}.WithDefaults()
	if p.MaxCommits != 100 || p.MaxFileBytes != 10<<20 || p.MaxBundleBytes != 1<<20 || p.BranchPrefix != port.DefaultBranchPrefix {
		t.Fatalf("defaults %+v", p)
	}
	var e *port.Export
	if !e.Empty() || (&port.Export{Commits: []string{"a"}}).Empty() {
		t.Fatal("Empty")
	}
}
