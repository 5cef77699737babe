package gitcli_test

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// newFixtureSameServer is a relay on f's server and runtime with another token (and
// its own cache, so it clones nothing of f's).
func newFixtureSameServer(t *testing.T, f *fixture, token string) *fixture {
	t.Helper()
	exporter, _, _ := artefacts(t)
	g := *f
	g.logs = &testenv.SyncBuffer{}
	var err error
	g.relay, err = gitcli.NewRelay(f.rt.runner,
		gitcli.WithCacheDir(f.cache), // the mirror is shared; the credential differs
		gitcli.WithExporter(exporter),
		gitcli.WithLogger(slog.New(slog.NewTextHandler(g.logs, nil))),
		gitcli.WithCredentials(func(context.Context, string) (gitcli.Credential, error) {
			return gitcli.Credential{Username: "x-access-token", Password: token}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return &g
}

var agentSig = object.Signature{Name: "Agent", Email: "agent@example.com", When: time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)}

// commitFiles plays the agent: it writes files into the workspace and commits them n
// times on the checked-out branch with go-git (in-process: the host's git never runs
// there). Each commit appends its number to every file.
func commitFiles(t testing.TB, ws string, files map[string]string, n int) []string {
	t.Helper()
	repo, err := git.PlainOpen(ws)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; i < n; i++ {
		for p, c := range files {
			full := filepath.Join(ws, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(c+"\n"+string(rune('0'+i))), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := wt.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		sig := agentSig
		sig.When = sig.When.Add(time.Duration(i) * time.Minute)
		h, err := wt.Commit("change", &git.CommitOptions{Author: &sig, Committer: &sig, AllowEmptyCommits: true})
		if err != nil {
			t.Fatal(err)
		}
		out = append([]string{h.String()}, out...)
	}
	return out
}

// rawCommit plays an agent writing objects directly: a commit with parents whose tree
// holds entries exactly as given (names git itself would refuse included), set as the
// tip of refs/heads/branch. It returns the commit.
func rawCommit(t *testing.T, ws, branch string, parents []plumbing.Hash, entries []object.TreeEntry) plumbing.Hash {
	t.Helper()
	repo, err := git.PlainOpen(ws)
	if err != nil {
		t.Fatal(err)
	}
	st := repo.Storer
	// Git's order: by name, a directory as if it ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	entries = append([]object.TreeEntry(nil), entries...)
	sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
	tree := &object.Tree{Entries: entries}
	to := st.NewEncodedObject()
	if err := tree.Encode(to); err != nil {
		t.Fatal(err)
	}
	th, err := st.SetEncodedObject(to)
	if err != nil {
		t.Fatal(err)
	}
	c := &object.Commit{Author: agentSig, Committer: agentSig, Message: "raw", TreeHash: th, ParentHashes: parents}
	co := st.NewEncodedObject()
	if err := c.Encode(co); err != nil {
		t.Fatal(err)
	}
	ch, err := st.SetEncodedObject(co)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(branch), ch)); err != nil {
		t.Fatal(err)
	}
	return ch
}

// blob stores data as a blob in the workspace's repository.
func blob(t *testing.T, ws string, data []byte) plumbing.Hash {
	t.Helper()
	repo, err := git.PlainOpen(ws)
	if err != nil {
		t.Fatal(err)
	}
	o := repo.Storer.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, _ := o.Writer()
	w.Write(data)
	w.Close()
	h, err := repo.Storer.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// baseTree returns the entries of the base commit's tree, to build on.
func baseTree(t *testing.T, ws string, base plumbing.Hash) []object.TreeEntry {
	t.Helper()
	repo, err := git.PlainOpen(ws)
	if err != nil {
		t.Fatal(err)
	}
	c, err := repo.CommitObject(base)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Tree()
	if err != nil {
		t.Fatal(err)
	}
	return append([]object.TreeEntry(nil), tr.Entries...)
}

func mustRepo(t *testing.T, ws string) *git.Repository {
	t.Helper()
	repo, err := git.PlainOpen(ws)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}
