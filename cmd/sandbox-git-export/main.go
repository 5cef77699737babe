// Command sandbox-git-export writes the commits of one branch of a repository as a git
// bundle. It runs inside a sandbox (no network, the agent's workspace mounted
// read-only, a fresh output directory writable) so that the only thing that ever reads
// the agent-written .git directory is a process that can reach nothing else: the host
// never runs git there. It is built on go-git, which executes no hooks, filters,
// pagers or helpers whatever the repository's config says.
//
// Usage:
//
//	sandbox-git-export -src DIR -out FILE -base SHA -branch NAME [-max-commits N] [-max-file-bytes N] [-max-bytes N]
//
// The bundle (format v2) names exactly one ref, refs/heads/NAME, and one prerequisite,
// the base commit, and carries the commits reachable from the branch tip and not from
// the base, with the trees and blobs they add over the base's tree. A branch still at
// the base writes no bundle. On success it prints one JSON line {"tip":..., "commits":N,
// "objects":N, "bundle":bool}; on failure a line {"error":..., "rule":..., "path":...} and
// exits with status 2 (refused by a cap or the ancestry rule) or 1 (a broken repository).
// Object sizes are read from object headers, so a huge blob is refused without being
// inflated.
// The host validates the bundle again: nothing printed here is trusted.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

type refusal struct {
	rule, msg, path string
}

func (r *refusal) Error() string { return r.msg }

func main() {
	src := flag.String("src", "/src", "repository working tree (read-only)")
	out := flag.String("out", "/out/export.bundle", "bundle to write")
	base := flag.String("base", "", "base commit recorded by the host")
	branch := flag.String("branch", "", "branch to export (without refs/heads/)")
	maxCommits := flag.Int("max-commits", 1000, "most commits to export")
	maxBytes := flag.Int64("max-bytes", 1<<30, "most uncompressed bytes of new objects")
	maxFile := flag.Int64("max-file-bytes", 1<<30, "largest new blob")
	flag.Parse()
	res, err := run(*src, *out, *base, *branch, *maxCommits, limits{file: *maxFile, total: *maxBytes})
	enc := json.NewEncoder(os.Stdout)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			_ = enc.Encode(map[string]string{"error": r.msg, "rule": r.rule, "path": r.path})
			os.Exit(2)
		}
		_ = enc.Encode(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	_ = enc.Encode(res)
}

type result struct {
	Tip     string `json:"tip"`
	Commits int    `json:"commits"`
	Objects int    `json:"objects"`
	Bundle  bool   `json:"bundle"`
}

type limits struct{ file, total int64 }

func run(src, out, baseHex, branch string, maxCommits int, lim limits) (*result, error) {
	base := plumbing.NewHash(baseHex)
	if len(baseHex) != 40 || base.IsZero() || base.String() != baseHex {
		return nil, fmt.Errorf("base %q is not a full commit id", baseHex)
	}
	ref := plumbing.NewBranchReferenceName(branch)
	if branch == "" || ref.Validate() != nil {
		return nil, fmt.Errorf("branch %q is not valid", branch)
	}
	// Only a .git directory: a .git file ("gitdir: ...") would send the reader elsewhere.
	dotgit := filepath.Join(src, ".git")
	if fi, err := os.Lstat(dotgit); err != nil || !fi.IsDir() {
		return nil, &refusal{rule: "layout", msg: ".git is not a directory"}
	}
	// Alternates resolve inside the same read-only tree, never on a host path.
	fs := newRegularFS(osfs.New(dotgit, osfs.WithBoundOS()))
	// Files go-git may or may not open (packed-refs only when a loose ref is missing):
	// a FIFO there is refused whether or not this export would have read it.
	for _, name := range []string{"HEAD", "packed-refs", "shallow", "commondir", "objects/info/alternates", "objects/info/packs"} {
		if err := fs.check(name); err != nil {
			return nil, err
		}
	}
	st := filesystem.NewStorageWithOptions(fs, cache.NewObjectLRU(32<<20), filesystem.Options{AlternatesFS: fs})
	res, err := export(st, out, base, ref, maxCommits, lim)
	if r := fs.seen.get(); r != nil {
		os.Remove(out)
		return nil, r
	}
	return res, err
}

func export(st *filesystem.Storage, out string, base plumbing.Hash, ref plumbing.ReferenceName, maxCommits int, lim limits) (*result, error) {
	branch := ref.Short()

	r, err := st.Reference(ref)
	if err != nil {
		return nil, &refusal{rule: "branch", msg: fmt.Sprintf("branch %s: %v", branch, err)}
	}
	if r.Type() != plumbing.HashReference {
		return nil, &refusal{rule: "branch", msg: fmt.Sprintf("branch %s is a symbolic ref", branch)}
	}
	tip := r.Hash()
	if tip == base {
		return &result{Tip: tip.String()}, nil
	}

	// Walk commits from the tip down to the base; every path must reach it.
	commits, err := newCommits(st, tip, base, maxCommits)
	if err != nil {
		return nil, err
	}
	objs, err := newObjects(st, commits, base, lim)
	if err != nil {
		return nil, err
	}

	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "# v2 git bundle\n-%s\n%s %s\n\n", base, tip, ref)
	if _, err := packfile.NewEncoder(w, st, false).Encode(objs, 10); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the pack: %w", err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &result{Tip: tip.String(), Commits: len(commits), Objects: len(objs), Bundle: true}, nil
}

// newCommits returns the commits reachable from tip and not from base, refusing a
// history that reaches a root without passing the base or has too many commits.
func newCommits(st *filesystem.Storage, tip, base plumbing.Hash, max int) ([]*object.Commit, error) {
	seen := map[plumbing.Hash]bool{base: true}
	var out []*object.Commit
	queue := []plumbing.Hash{tip}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := object.GetCommit(st, h)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", h, err)
		}
		out = append(out, c)
		if len(out) > max {
			return nil, &refusal{rule: "commit-count", msg: fmt.Sprintf("more than %d new commits", max)}
		}
		if len(c.ParentHashes) == 0 {
			return nil, &refusal{rule: "ancestry", msg: fmt.Sprintf("commit %s does not descend from the base", h)}
		}
		queue = append(queue, c.ParentHashes...)
	}
	return out, nil
}

// newObjects lists the commits, trees and blobs the new commits add: everything they
// reach that the base's tree does not already hold (a blob the base has under any path
// is not sent again). Gitlinks (submodule commits) are not objects of this repository.
func newObjects(st *filesystem.Storage, commits []*object.Commit, base plumbing.Hash, lim limits) ([]plumbing.Hash, error) {
	have := map[plumbing.Hash]bool{}
	bc, err := object.GetCommit(st, base)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", base, err)
	}
	mark := func(h plumbing.Hash, _ string, _ bool) error { have[h] = true; return nil }
	if err := walkTree(st, bc.TreeHash, "", map[plumbing.Hash]bool{}, mark); err != nil {
		return nil, err
	}
	var out []plumbing.Hash
	var total int64
	add := func(h plumbing.Hash, path string, blob bool) error {
		if have[h] {
			return nil
		}
		have[h] = true
		sz, err := st.EncodedObjectSize(h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		if blob && sz > lim.file {
			return &refusal{rule: "file-size", path: path, msg: fmt.Sprintf("%s is %d bytes, over %d", path, sz, lim.file)}
		}
		if total += sz; total > lim.total {
			return &refusal{rule: "total-size", path: path, msg: fmt.Sprintf("new objects exceed %d bytes", lim.total)}
		}
		out = append(out, h)
		return nil
	}
	for _, c := range commits {
		if err := add(c.Hash, "", false); err != nil {
			return nil, err
		}
		if err := walkTree(st, c.TreeHash, "", have, add); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// walkTree calls add for tree h and everything below it not in skip.
func walkTree(st *filesystem.Storage, h plumbing.Hash, dir string, skip map[plumbing.Hash]bool, add func(plumbing.Hash, string, bool) error) error {
	if skip[h] {
		return nil
	}
	if err := add(h, dir, false); err != nil {
		return err
	}
	t, err := object.GetTree(st, h)
	if err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	for _, e := range t.Entries {
		p := path.Join(dir, e.Name)
		switch {
		case e.Mode.IsFile():
			if !skip[e.Hash] {
				if err := add(e.Hash, p, true); err != nil {
					return err
				}
			}
		case e.Mode == filemode.Dir:
			if err := walkTree(st, e.Hash, p, skip, add); err != nil {
				return err
			}
		}
	}
	return nil
}
