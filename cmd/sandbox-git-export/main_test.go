package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=A", "GIT_COMMITTER_EMAIL=a@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func repo(t *testing.T) (dir, base string) {
	t.Helper()
	testenv.NeedCommand(t, "git", "git")
	dir = t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644)
	git(t, dir, "add", "a")
	git(t, dir, "commit", "-q", "-m", "base")
	return dir, git(t, dir, "rev-parse", "HEAD")
}

func commit(t *testing.T, dir, name string) string {
	os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644)
	git(t, dir, "add", name)
	git(t, dir, "commit", "-q", "-m", name)
	return git(t, dir, "rev-parse", "HEAD")
}

// The bundle git reads back holds exactly base..tip, with the base as prerequisite.
func TestExportBundle(t *testing.T) {
	dir, base := repo(t)
	// b on main; a side branch from the base merges main; c on top: three commits.
	commit(t, dir, "b")
	git(t, dir, "checkout", "-q", "-b", "side", base)
	git(t, dir, "merge", "-q", "--no-ff", "-m", "merge", "main")
	tip := commit(t, dir, "c")
	git(t, dir, "branch", "-f", "main", tip)
	out := filepath.Join(t.TempDir(), "x.bundle")
	res, err := run(dir, out, base, "main", 10, limits{file: 1 << 20, total: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tip != tip || !res.Bundle || res.Commits != 3 {
		t.Fatalf("result %+v, want tip %s and 3 commits", res, tip)
	}
	if v := git(t, dir, "bundle", "verify", out); !strings.Contains(v, "okay") {
		t.Fatalf("verify: %s", v)
	}
	heads := git(t, dir, "bundle", "list-heads", out)
	if heads != tip+" refs/heads/main" {
		t.Fatalf("heads %q", heads)
	}
	clone := t.TempDir()
	git(t, clone, "init", "-q", "--bare")
	git(t, clone, "fetch", "-q", dir, base)
	git(t, clone, "fetch", "-q", out, "refs/heads/main:refs/heads/got")
	if got := git(t, clone, "rev-list", "got", "^"+base); len(strings.Fields(got)) != 3 {
		t.Fatalf("fetched %q", got)
	}
}

func TestExportRefusals(t *testing.T) {
	dir, base := repo(t)
	out := func() string { return filepath.Join(t.TempDir(), "x.bundle") }
	lim := limits{file: 1 << 20, total: 1 << 20}
	refused := func(err error, rule string) {
		t.Helper()
		var r *refusal
		if !errors.As(err, &r) || r.rule != rule {
			t.Fatalf("err = %v, want rule %s", err, rule)
		}
	}
	if res, err := run(dir, out(), base, "main", 10, lim); err != nil || res.Bundle || res.Tip != base {
		t.Fatalf("branch at the base: %+v %v", res, err)
	}
	commit(t, dir, "b")
	commit(t, dir, "c")
	_, err := run(dir, out(), base, "main", 1, lim)
	refused(err, "commit-count")
	os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644)
	git(t, dir, "add", "big")
	git(t, dir, "commit", "-q", "-m", "big")
	_, err = run(dir, out(), base, "main", 10, lim)
	refused(err, "file-size")
	git(t, dir, "checkout", "-q", "--orphan", "orphan")
	orphan := commit(t, dir, "o")
	git(t, dir, "branch", "-f", "main", orphan)
	_, err = run(dir, out(), base, "main", 10, lim)
	refused(err, "ancestry")
	git(t, dir, "symbolic-ref", "refs/heads/main", "refs/heads/orphan")
	_, err = run(dir, out(), base, "main", 10, lim)
	refused(err, "branch")
	// A .git file pointing elsewhere is not followed.
	wt := t.TempDir()
	os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+filepath.Join(dir, ".git")+"\n"), 0o644)
	_, err = run(wt, out(), base, "main", 10, lim)
	refused(err, "layout")
}

// A FIFO where git keeps a file is refused at once with the layout rule and its path,
// never opened (an open would block until the export sandbox's timeout).
func TestExportRefusesFIFOs(t *testing.T) {
	lim := limits{file: 1 << 20, total: 1 << 20}
	for name, place := range map[string]func(dir, tip string) string{
		"packed-refs": func(dir, _ string) string { return "packed-refs" },
		"loose ref": func(dir, _ string) string {
			os.Remove(filepath.Join(dir, ".git/refs/heads/main"))
			return "refs/heads/main"
		},
		"object": func(dir, tip string) string {
			p := "objects/" + tip[:2] + "/" + tip[2:]
			os.Remove(filepath.Join(dir, ".git", p))
			return p
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, base := repo(t)
			tip := commit(t, dir, "b")
			rel := place(dir, tip)
			if err := syscall.Mkfifo(filepath.Join(dir, ".git", rel), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := run(dir, filepath.Join(t.TempDir(), "x.bundle"), base, "main", 10, lim)
				done <- err
			}()
			select {
			case err := <-done:
				var r *refusal
				if !errors.As(err, &r) || r.rule != "layout" || r.path != ".git/"+rel {
					t.Fatalf("err = %v (%+v), want layout at .git/%s", err, r, rel)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the exporter blocked on the FIFO")
			}
		})
	}
}
