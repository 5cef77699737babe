package runlease

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestHoldRelease(t *testing.T) {
	root := t.TempDir()
	l, err := Hold(root, "owner", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if !Held(root, "owner", "run-1") {
		t.Error("a held lease is not Held")
	}
	if Held(root, "other", "run-1") || Held(root, "owner", "run-2") {
		t.Error("Held for another owner or run")
	}
	l.Release()
	l.Release()
	if Held(root, "owner", "run-1") {
		t.Error("a released lease is still Held")
	}
}

func TestDeadHolderReleases(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "owner", "run-1")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	// A fresh lease naming this process with another start time: a later process
	// with the dead holder's id.
	if err := os.WriteFile(p, []byte(fmt.Sprintf("%d 1\n", os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	if Held(root, "owner", "run-1") {
		t.Error("a lease of a process that is gone (its id reused) is Held")
	}
	if err := os.WriteFile(p, []byte(fmt.Sprintf("%d %s\n", os.Getpid(), startTime(os.Getpid()))), 0o600); err != nil {
		t.Fatal(err)
	}
	if !Held(root, "owner", "run-1") {
		t.Error("a fresh lease of a live holder is not Held")
	}
}

func TestBadNames(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b"} {
		if _, err := Hold(t.TempDir(), "owner", n); err == nil {
			t.Errorf("Hold(%q) succeeded", n)
		}
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	live, err := Hold(root, "owner", "live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	p := filepath.Join(root, "owner", "dead")
	if err := os.WriteFile(p, []byte("999999999 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := Prune(root, "owner"); n != 1 {
		t.Errorf("Prune removed %d, want the dead holder's lease only", n)
	}
	if !Held(root, "owner", "live") {
		t.Error("Prune removed a held lease")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the dead holder's lease is still there: %v", err)
	}
}
