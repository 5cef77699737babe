package gitcli_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/agentsandbox/sandbox/port"
)

// plantHostile writes, as an agent could, a repository config naming a command that
// creates marker for every key git would run something for, hooks that do the same,
// and an include of a host file that does it too. It writes through an os.Root of the
// workspace: an adversary may already have made any of these paths a link out of it
// (the test runs as root), and such a link is then left as the adversary made it.
func plantHostile(t *testing.T, ws, marker string) {
	t.Helper()
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	write := func(rel string, data []byte, mode os.FileMode) {
		t.Helper()
		if fi, err := root.Lstat(rel); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return // the adversary's link stays; nothing is written through it
		}
		if err := root.WriteFile(rel, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	touch := "touch " + marker
	inc := filepath.Join(t.TempDir(), "included.cfg")
	if err := os.WriteFile(inc, []byte("[core]\n\tfsmonitor = "+touch+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(".git", "evil-hooks")
	cfg := fmt.Sprintf(`[core]
	repositoryformatversion = 0
	bare = false
	fsmonitor = %[1]s
	hooksPath = %[2]s
	sshCommand = %[1]s
	pager = %[1]s
	editor = %[1]s
	askPass = %[1]s
	gitProxy = %[1]s
[filter "evil"]
	clean = %[1]s
	smudge = %[1]s
	process = %[1]s
	required = true
[diff]
	external = %[1]s
[diff "evil"]
	textconv = %[1]s
	command = %[1]s
[credential]
	helper = !%[1]s
[include]
	path = %[3]s
[safe]
	directory = *
[uploadpack]
	packObjectsHook = %[1]s
[protocol]
	allow = always
[remote "origin"]
	url = ext::sh -c %[1]s
	fetch = +refs/heads/*:refs/remotes/origin/*
	uploadpack = %[1]s
	receivepack = %[1]s
[branch "main"]
	remote = origin
	merge = refs/heads/main
`, touch, filepath.Join(ws, hooks), inc)
	write(filepath.Join(".git", "config"), []byte(cfg), 0o644)
	for _, dir := range []string{hooks, filepath.Join(".git", "hooks")} {
		if fi, err := root.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		if err := root.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"pre-commit", "post-checkout", "pre-push", "reference-transaction", "post-index-change", "fsmonitor-watchman", "pre-receive", "post-update", "pre-auto-gc"} {
			write(filepath.Join(dir, h), []byte("#!/bin/sh\n"+touch+"\n"), 0o755)
		}
	}
	write(".gitattributes", []byte("* filter=evil diff=evil\n"), 0o644)
}

// hostCanary creates a host file for an adversary to point at (never a real system
// file: the suite runs as root) and fails the test if it changed by the end.
func hostCanary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host-canary")
	const content = "root:CANARY-HASH:20000:0:99999:7:::\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Errorf("the host canary %s changed: %q, %v", filepath.Base(p), b, err)
		}
	})
	return p
}

type adversary struct {
	name   string
	policy port.RepoPolicy
	// act plays the agent on the cloned workspace.
	act func(t *testing.T, ws string, base plumbing.Hash, f *fixture)
	// rule is the expected refusal; empty means the export is safely ingested and pushed.
	rule port.Rule
	path string
	push string // for a refused push target
	// commit says the refusal must name the commit (a malformed one).
	commit bool
}

// rawObject stores data as an object of type typ in the workspace's repository, as an
// agent writing objects by hand can.
func rawObject(t *testing.T, ws string, typ plumbing.ObjectType, data []byte) plumbing.Hash {
	t.Helper()
	st := mustRepo(t, ws).Storer
	o := st.NewEncodedObject()
	o.SetType(typ)
	w, _ := o.Writer()
	w.Write(data)
	w.Close()
	h, err := st.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func adversaries() []adversary {
	sym := func(t *testing.T, target, link string) {
		t.Helper()
		os.RemoveAll(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return []adversary{
		{name: "hostile config, hooks and attributes are never run", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x", ".gitattributes": "* filter=evil diff=evil"}, 2)
		}},
		{name: "packed-refs symlinked to a host file", rule: port.RuleBranch, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			tip := commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)[0]
			host := filepath.Join(t.TempDir(), "host-refs")
			os.WriteFile(host, []byte(tip+" refs/heads/main\n"), 0o644)
			os.Remove(filepath.Join(ws, ".git", "refs", "heads", "main"))
			sym(t, host, filepath.Join(ws, ".git", "packed-refs"))
		}},
		{name: "objects symlinked to the host mirror", rule: port.RuleLayout, act: func(t *testing.T, ws string, _ plumbing.Hash, f *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
			mirrors, _ := filepath.Glob(filepath.Join(f.cache, "mirrors", "*.git"))
			if len(mirrors) != 1 {
				t.Fatalf("mirrors %v", mirrors)
			}
			sym(t, filepath.Join(mirrors[0], "objects"), filepath.Join(ws, ".git", "objects"))
		}},
		{name: ".git symlinked to a host repository", rule: port.RuleLayout, act: func(t *testing.T, ws string, _ plumbing.Hash, f *fixture) {
			sym(t, f.srv.RepoDir(f.repo), filepath.Join(ws, ".git"))
		}},
		{name: "config symlinked to a host file", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
			sym(t, hostCanary(t), filepath.Join(ws, ".git", "config"))
		}},
		{name: "commit not descending from the base", rule: port.RuleAncestry, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", nil, []object.TreeEntry{{Name: "x", Mode: filemode.Regular, Hash: blob(t, ws, []byte("x"))}})
		}},
		{name: "merge of an unrelated history", rule: port.RuleAncestry, act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			orphan := rawCommit(t, ws, "orphan", nil, []object.TreeEntry{{Name: "y", Mode: filemode.Regular, Hash: blob(t, ws, []byte("y"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base, orphan}, baseTree(t, ws, base))
		}},
		{name: "branch ref escaping the repository", rule: port.RuleBranch, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
			rel, err := filepath.Rel(filepath.Join(ws, ".git"), hostCanary(t))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(ws, ".git", "refs", "heads", "main"), []byte("ref: "+rel+"\n"), 0o644)
		}},
		{name: "push target escaping the prefix", push: "agent/../main", rule: port.RulePushBranch, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
		}},
		{name: "push to the default branch", push: "main", policy: port.RepoPolicy{BranchPrefix: "ma/"}, rule: port.RulePushBranch, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
		}},
		{name: "1 GiB blob of zeros", rule: port.RuleFileSize, path: "big.bin", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			h := sparseBlob(t, ws, 1<<30)
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: "big.bin", Mode: filemode.Regular, Hash: h}))
		}},
		{name: "path with ..", rule: port.RulePath, act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			sub := treeOf(t, ws, []object.TreeEntry{{Name: "passwd", Mode: filemode.Regular, Hash: blob(t, ws, []byte("root::0:0::/:/bin/sh\n"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: "..", Mode: filemode.Dir, Hash: sub}))
		}},
		{name: ".git directory committed", rule: port.RulePath, act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			sub := treeOf(t, ws, []object.TreeEntry{{Name: "config", Mode: filemode.Regular, Hash: blob(t, ws, []byte("[core]\n\tfsmonitor = touch /tmp/x\n"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: ".GIT", Mode: filemode.Dir, Hash: sub}))
		}},
		{name: "absolute symlink committed", rule: port.RuleSymlink, path: "shadow", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: "shadow", Mode: filemode.Symlink, Hash: blob(t, ws, []byte(hostCanary(t)))}))
		}},
		{name: "relative symlink out of the repository", rule: port.RuleSymlink, path: "src/up", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			src := treeOf(t, ws, []object.TreeEntry{{Name: "up", Mode: filemode.Symlink, Hash: blob(t, ws, []byte("../../etc/passwd"))}})
			tree := baseTree(t, ws, base)
			for i := range tree {
				if tree[i].Name == "src" {
					tree[i].Hash = src
				}
			}
			rawCommit(t, ws, "main", []plumbing.Hash{base}, tree)
		}},
		{name: "workflow change under a deny pattern", policy: port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}}, rule: port.RuleDenied, path: ".github/workflows/ci.yml", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{".github/workflows/ci.yml": "on: push\njobs: {steal: {runs-on: x}}"}, 1)
		}},
		{name: "submodule under no-submodules", policy: port.RepoPolicy{NoSubmodules: true}, rule: port.RuleSubmodule, path: "vendor", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: "vendor", Mode: filemode.Submodule, Hash: base}))
		}},
		{name: "identity not allowed", policy: port.RepoPolicy{Identity: port.IdentityPolicy{AllowedEmails: []string{"*@corp.example"}}}, rule: port.RuleIdentity, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 1)
		}},
		{name: "too many commits", policy: port.RepoPolicy{MaxCommits: 2}, rule: port.RuleCommitCount, act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"x.txt": "x"}, 3)
		}},
		// Spellings of .git that NTFS and HFS+ read as .git, refused with their path.
		{name: "NTFS short name GIT~1", rule: port.RulePath, path: "GIT~1/config", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			sub := treeOf(t, ws, []object.TreeEntry{{Name: "config", Mode: filemode.Regular, Hash: blob(t, ws, []byte("[core]\n\tfsmonitor = touch /tmp/x\n"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: "GIT~1", Mode: filemode.Dir, Hash: sub}))
		}},
		{name: "NTFS stream .git::$INDEX_ALLOCATION", rule: port.RulePath, path: ".git::$INDEX_ALLOCATION/config", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			sub := treeOf(t, ws, []object.TreeEntry{{Name: "config", Mode: filemode.Regular, Hash: blob(t, ws, []byte("x"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: ".git::$INDEX_ALLOCATION", Mode: filemode.Dir, Hash: sub}))
		}},
		{name: "HFS ignorable code point in .git", rule: port.RulePath, path: ".g\u200cit/config", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			sub := treeOf(t, ws, []object.TreeEntry{{Name: "config", Mode: filemode.Regular, Hash: blob(t, ws, []byte("x"))}})
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base), object.TreeEntry{Name: ".g\u200cit", Mode: filemode.Dir, Hash: sub}))
		}},
		// Round 3: what the pushed branch does to whoever clones it.
		{name: "symlink into .git spelled for NTFS", rule: port.RuleSymlink, path: "hooks", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base),
				object.TreeEntry{Name: "hooks", Mode: filemode.Symlink, Hash: blob(t, ws, []byte(".git::$INDEX_ALLOCATION/hooks"))}))
		}},
		{name: "symlink into .git spelled for HFS+", rule: port.RuleSymlink, path: "hooks", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base),
				object.TreeEntry{Name: "hooks", Mode: filemode.Symlink, Hash: blob(t, ws, []byte(".G\u200cIT. /hooks"))}))
		}},
		{name: "symlink into .git through an NTFS short name", rule: port.RuleSymlink, path: "cfg", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base),
				object.TreeEntry{Name: "cfg", Mode: filemode.Symlink, Hash: blob(t, ws, []byte("GIT~1\\config"))}))
		}},
		{name: "workflow change in other letter case", policy: port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}}, rule: port.RuleDenied, path: ".GitHub/Workflows/ci.yml", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{".GitHub/Workflows/ci.yml": "on: push"}, 1)
		}},
		{name: "denied directory spelled in NFD", policy: port.RepoPolicy{DenyPaths: []string{"docs/café/**"}}, rule: port.RuleDenied, path: "docs/cafe\u0301/index.md", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"docs/cafe\u0301/index.md": "x"}, 1)
		}},
		{name: "workflow change with an HFS+ ignorable code point", policy: port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}}, rule: port.RuleDenied, path: ".github\u200c/workflows/ci.yml", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{".github\u200c/workflows/ci.yml": "on: push"}, 1)
		}},
		{name: "workflow change through an NTFS short name", policy: port.RepoPolicy{DenyPaths: []string{".github/workflows/**"}}, rule: port.RuleDenied, path: "GITHUB~1/workflows/ci.yml", act: func(t *testing.T, ws string, _ plumbing.Hash, _ *fixture) {
			commitFiles(t, ws, map[string]string{"GITHUB~1/workflows/ci.yml": "on: push"}, 1)
		}},
		{name: "bidirectional override and C1 controls in a refused name", rule: port.RuleSymlink, path: "a\u202egpj.exe\u0085\u009b", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base),
				object.TreeEntry{Name: "a\u202egpj.exe\u0085\u009b", Mode: filemode.Symlink, Hash: blob(t, ws, []byte("/etc/\u202eshadow\u0085"))}))
		}},
		// fsck-only refusals name the commit or the path their object has.
		{name: "malformed commit", rule: port.RuleObject, commit: true, act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			c, err := mustRepo(t, ws).CommitObject(base)
			if err != nil {
				t.Fatal(err)
			}
			raw := fmt.Sprintf("tree %s\nparent %s\nauthor Agent <agent@example.com> 1770000000 +0000\ncommitter Agent <agent@example.com> 1770000000 +99999999999\n\nbad zone\n", c.TreeHash, base)
			h := rawObject(t, ws, plumbing.CommitObject, []byte(raw))
			if err := mustRepo(t, ws).Storer.SetReference(plumbing.NewHashReference("refs/heads/main", h)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hostile submodule URL", rule: port.RuleSubmodule, path: ".gitmodules", act: func(t *testing.T, ws string, base plumbing.Hash, _ *fixture) {
			mods := blob(t, ws, []byte("[submodule \"x\"]\n\tpath = x\n\turl = --upload-pack=touch${IFS}/tmp/pwned\n"))
			rawCommit(t, ws, "main", []plumbing.Hash{base}, append(baseTree(t, ws, base),
				object.TreeEntry{Name: ".gitmodules", Mode: filemode.Regular, Hash: mods}, object.TreeEntry{Name: "x", Mode: filemode.Submodule, Hash: base}))
		}},
	}
}

// TestAdversarialWorkspaces runs each adversary against every runtime. The workspace
// always also carries a hostile config, hooks and attributes: the marker they would
// create on the host must never appear, whether the export is refused (with the right
// rule and path) or ingested and pushed.
func TestAdversarialWorkspaces(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt.name, func(t *testing.T) {
			f := newFixture(t, rt, canaryToken)
			for i, adv := range adversaries() {
				t.Run(adv.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					defer cancel()
					marker := filepath.Join(t.TempDir(), "marker")
					ws := workspace(t)
					runID := fmt.Sprintf("adv-%d", i)
					co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
					if err != nil {
						t.Fatal(err)
					}
					adv.act(t, ws, plumbing.NewHash(co.Base), f)
					if fi, err := os.Lstat(filepath.Join(ws, ".git")); err == nil && fi.IsDir() {
						plantHostile(t, ws, marker)
					}
					defer func() {
						if _, err := os.Lstat(marker); err == nil {
							t.Fatal("the marker appeared: the host ran something the agent planted")
						}
					}()

					exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: rt.image, Policy: adv.policy})
					if err == nil {
						var pr *port.PushResult
						pr, err = f.relay.Push(ctx, port.PushRequest{Export: *exp, Branch: adv.push, Policy: adv.policy})
						if err == nil {
							if adv.rule != "" {
								t.Fatalf("pushed %+v, want a %s refusal", pr, adv.rule)
							}
							if got, _ := f.srv.Git(f.repo, "rev-parse", "refs/heads/"+pr.Branch); got != exp.Tip || len(exp.Commits) == 0 {
								t.Fatalf("server branch %s at %q, export tip %s (%d commits)", pr.Branch, got, exp.Tip, len(exp.Commits))
							}
							return
						}
					}
					t.Logf("refused: %v", err)
					var re *port.RejectError
					if !errors.As(err, &re) || !errors.Is(err, port.ErrRejected) {
						t.Fatalf("err = %v, want a RejectError (%s)", err, adv.rule)
					}
					if re.Rule != adv.rule || (adv.path != "" && re.Path != adv.path) || (adv.commit && re.Commit == "") {
						t.Fatalf("refused with %v (rule %s, path %q, commit %q), want rule %s path %q", err, re.Rule, re.Path, re.Commit, adv.rule, adv.path)
					}
					if strings.Contains(err.Error(), canaryToken) {
						t.Fatal("error carries the token")
					}
					// Every byte the agent chose is escaped in the error.
					if strings.ContainsFunc(err.Error(), func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) {
						t.Fatalf("the error carries raw control or format characters: %q", err.Error())
					}
				})
			}
		})
	}
}

// sparseBlob writes a loose blob object of size zero bytes straight into the
// workspace's object store (as an agent can), compressed, without holding it in memory.
func sparseBlob(t *testing.T, ws string, size int64) plumbing.Hash {
	t.Helper()
	sparse.Lock()
	defer sparse.Unlock()
	if sparse.z == nil {
		sparse.id, sparse.z = zeroObject(size)
	}
	dir := filepath.Join(ws, ".git", "objects", sparse.id.String()[:2])
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, sparse.id.String()[2:]), sparse.z, 0o444); err != nil {
		t.Fatal(err)
	}
	return sparse.id
}

var sparse struct {
	sync.Mutex
	id plumbing.Hash
	z  []byte
}

// zeroObject returns the id and compressed loose form of a blob of size zero bytes.
func zeroObject(size int64) (plumbing.Hash, []byte) {
	hdr := fmt.Sprintf("blob %d\x00", size)
	h := sha1.New()
	h.Write([]byte(hdr))
	zero := make([]byte, 1<<20)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	zw.Write([]byte(hdr))
	for n := int64(0); n < size; n += int64(len(zero)) {
		h.Write(zero)
		zw.Write(zero)
	}
	zw.Close()
	return plumbing.Hash(h.Sum(nil)), z.Bytes()
}

// treeOf stores a tree with exactly the given entries.
func treeOf(t *testing.T, ws string, entries []object.TreeEntry) plumbing.Hash {
	t.Helper()
	h := rawCommit(t, ws, "scratch-"+fmt.Sprint(time.Now().UnixNano()), nil, entries)
	c, err := object.GetCommit(mustRepo(t, ws).Storer, h)
	if err != nil {
		t.Fatal(err)
	}
	return c.TreeHash
}
