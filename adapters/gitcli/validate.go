package gitcli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// quarantine is a host-owned bare repository holding one artefact's objects; its object
// store borrows from the mirror (alternates), so only the new objects are copied.
type quarantine struct {
	dir     string
	tip     string
	commits []string // newest first
}

func (q *quarantine) remove() { os.RemoveAll(q.dir) }

const quarantineRef = "refs/agentsandbox/tip"

// ingest scans the artefact, fetches it into a fresh quarantine, validates it against
// pol and has git fsck its objects. On success the quarantine's quarantineRef is the
// (possibly rewritten) tip.
func (r *Relay) ingest(ctx context.Context, runID string, co port.Checkout, pol port.RepoPolicy, bundle string) (*quarantine, error) {
	info, err := scanArtefact(bundle, co, pol)
	if err != nil {
		return nil, err
	}

	dir, err := r.scratchDir("quarantine", runID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	q := &quarantine{dir: dir}
	if _, err := r.run(ctx, gitCmd{args: []string{"init", "--bare", "--template=", "--quiet", "--", dir}}); err != nil {
		return q, fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	mirror := r.mirrorDir(co.URL)
	if err := os.WriteFile(filepath.Join(dir, "objects", "info", "alternates"), []byte(filepath.Join(mirror, "objects")+"\n"), 0o600); err != nil {
		return q, fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	git := func(args ...string) ([]byte, error) {
		return r.run(ctx, gitCmd{gitDir: dir, args: args})
	}
	// The fetch only indexes (hashes) the objects; sizes are bounded by the scan. Our own
	// checks run next so a refusal names its path; git fsck --strict runs last.
	if _, err := git("fetch", "--no-tags", "--no-write-fetch-head", "--quiet", "--", bundle, "refs/heads/"+co.Branch+":"+quarantineRef); err != nil {
		return q, &port.RejectError{Rule: port.RuleObject, Detail: "git refused the artefact: " + clip(gitStderr(err), 512)}
	}
	tip := info.tip
	if _, err := git("merge-base", "--is-ancestor", co.Base, tip); err != nil {
		return q, &port.RejectError{Rule: port.RuleAncestry, Commit: tip, Detail: "the branch does not descend from the base"}
	}
	commits, err := branchCommits(git, co.Base, tip, pol.MaxCommits)
	if err != nil {
		return q, err
	}

	if pol.Identity.Rewrite == nil && len(pol.Identity.AllowedEmails) > 0 {
		if err := r.checkIdentities(ctx, dir, tip, co.Base, pol.Identity.AllowedEmails); err != nil {
			return q, err
		}
	}
	deny, err := compileDeny(pol.DenyPaths)
	if err != nil {
		return q, err
	}
	for _, c := range commits {
		for _, p := range c.parents {
			if err := r.checkDiff(ctx, dir, p, c.id, pol, deny); err != nil {
				return q, err
			}
		}
	}
	if err := r.fsck(ctx, dir, bundle, tip, co.Base); err != nil {
		return q, err
	}
	if pol.Identity.Rewrite != nil {
		if tip, err = r.rewrite(ctx, dir, tip, co.Base, *pol.Identity.Rewrite); err != nil {
			return q, err
		}
		if _, err := git("update-ref", quarantineRef, tip); err != nil {
			return q, fmt.Errorf("%w: %v", port.ErrInternal, err)
		}
		all, err := git("rev-list", tip, "^"+co.Base)
		if err != nil {
			return q, fmt.Errorf("%w: %v", port.ErrInternal, err)
		}
		commits = commits[:0]
		for line := range strings.Lines(string(all)) {
			commits = append(commits, branchCommit{id: strings.TrimSpace(line)})
		}
	}
	q.tip = tip
	for _, c := range commits {
		q.commits = append(q.commits, c.id)
	}
	return q, nil
}

// scanArtefact checks the artefact file before git reads it: within the policy's
// bundle cap, and a bundle scanBundle accepts.
func scanArtefact(bundle string, co port.Checkout, pol port.RepoPolicy) (*bundleInfo, error) {
	f, err := os.Open(bundle)
	if err != nil {
		return nil, fmt.Errorf("%w: artefact: %v", port.ErrInternal, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && fi.Size() > pol.MaxBundleBytes {
		err = &port.RejectError{Rule: port.RuleTotalSize, Detail: fmt.Sprintf("artefact is %d bytes, over %d", fi.Size(), pol.MaxBundleBytes)}
	}
	if err != nil {
		return nil, err
	}
	return scanBundle(f, co.Branch, co.Base, pol.MaxFileBytes, pol.MaxTotalBytes)
}

// branchCommit is a commit of the agent's branch and its parents.
type branchCommit struct {
	id      string
	parents []string
}

// branchCommits lists the commits from base (excluded) to tip, newest first: at
// most maxCommits, every one descending from base.
func branchCommits(git func(args ...string) ([]byte, error), base, tip string, maxCommits int) ([]branchCommit, error) {
	all, err := git("rev-list", "--parents", fmt.Sprintf("--max-count=%d", maxCommits+1), tip, "^"+base)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	var commits []branchCommit
	for line := range strings.Lines(string(all)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		commits = append(commits, branchCommit{f[0], f[1:]})
	}
	if len(commits) > maxCommits {
		return nil, &port.RejectError{Rule: port.RuleCommitCount, Detail: fmt.Sprintf("more than %d commits", maxCommits)}
	}
	onPath, err := git("rev-list", "--ancestry-path", tip, "^"+base)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	descends := map[string]bool{}
	for line := range strings.Lines(string(onPath)) {
		descends[strings.TrimSpace(line)] = true
	}
	for _, c := range commits {
		if !descends[c.id] {
			return nil, &port.RejectError{Rule: port.RuleAncestry, Commit: c.id, Detail: "commit does not descend from the base"}
		}
	}
	return commits, nil
}

func gitStderr(err error) string {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.stderr
	}
	return err.Error()
}

// fsck has git check every object of the artefact strictly (bad trees, ".git" in any
// spelling, malformed commits, links to missing objects): the bundle's pack is indexed
// again with --strict, into a scratch file the relay discards.
func (r *Relay) fsck(ctx context.Context, dir, bundle, tip, base string) error {
	f, err := os.Open(bundle)
	if err != nil {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return &port.RejectError{Rule: port.RuleLayout, Detail: "artefact header"}
		}
		if line == "\n" {
			break
		}
	}
	pack := filepath.Join(dir, "fsck.pack")
	out, err := os.Create(pack)
	if err != nil {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	_, err = io.Copy(out, br)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	defer os.Remove(pack)
	defer os.Remove(strings.TrimSuffix(pack, ".pack") + ".idx")
	if _, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"index-pack", "--strict", pack}}); err != nil {
		msg := gitStderr(err)
		re := &port.RejectError{Rule: port.RuleObject, Detail: "git fsck: " + clip(msg, 512)}
		if m := fsckMsgRe.FindStringSubmatch(msg); m != nil {
			oid, id := m[1], m[2]
			re.Rule = fsckRule(id)
			re.Detail = "git fsck " + id + ": " + clip(msg, 480)
			// The objects are in the quarantine (fetched before the checks): name the
			// commit, or the path the object has in the new commits.
			if kind, _ := r.run(ctx, gitCmd{gitDir: dir, args: []string{"cat-file", "-t", oid}}); strings.TrimSpace(string(kind)) == "commit" {
				re.Commit = oid
			} else {
				re.Commit, re.Path = r.objectPath(ctx, dir, oid, tip, base)
			}
		}
		return re
	}
	return nil
}

// fsckMsgRe finds the first object fsck complains about and its message id.
var fsckMsgRe = regexp.MustCompile(`object ([0-9a-f]{40,64}): ([a-zA-Z]+):`)

// fsckRule maps a git fsck message id to the rule it breaks.
func fsckRule(id string) port.Rule {
	switch {
	case strings.HasPrefix(id, "gitmodules"):
		return port.RuleSubmodule
	case id == "hasDot", id == "hasDotdot", id == "hasDotgit", id == "fullPathname", id == "emptyName",
		id == "hasDotgitmodules", id == "hasDotgitattributes", id == "nulInPath", id == "duplicateEntries",
		strings.HasPrefix(id, "gitattributes"):
		return port.RulePath
	}
	return port.RuleObject
}

// objectPath finds the path object oid has in the commits base..tip (the first
// found; for a tree with a refused entry, that entry's path) and the commit.
func (r *Relay) objectPath(ctx context.Context, dir, oid, tip, base string) (commit, path string) {
	list, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"rev-list", tip, "^" + base}})
	if err != nil {
		return "", ""
	}
	// badEntry is the refused entry of tree oid, appended to its path.
	badEntry := func(prefix string) string {
		sub, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"ls-tree", "-z", "--name-only", oid}})
		if err == nil {
			for _, name := range bytes.Split(sub, []byte{0}) {
				if len(name) > 0 && checkPath(string(name)) != nil {
					return strings.TrimPrefix(prefix+"/"+string(name), "/")
				}
			}
		}
		return prefix
	}
	for line := range strings.Lines(string(list)) {
		c := strings.TrimSpace(line)
		if root, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"rev-parse", c + "^{tree}"}}); err == nil && strings.TrimSpace(string(root)) == oid {
			return c, badEntry("")
		}
		out, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"ls-tree", "-r", "-t", "-z", "--full-tree", c}})
		if err != nil {
			continue
		}
		for _, ent := range bytes.Split(out, []byte{0}) {
			meta, p, ok := bytes.Cut(ent, []byte{'\t'})
			f := strings.Fields(string(meta))
			if !ok || len(f) != 3 || f[2] != oid {
				continue
			}
			if f[1] == "tree" {
				return c, badEntry(string(p))
			}
			return c, string(p)
		}
	}
	return "", ""
}

// checkDiff applies the path, size, symlink and submodule rules to what commit changes
// against parent.
func (r *Relay) checkDiff(ctx context.Context, dir, parent, commit string, pol port.RepoPolicy, deny *denyRules) error {
	out, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"diff-tree", "-r", "-z", "--raw", "--no-renames", "--no-ext-diff", "--no-textconv", parent, commit}})
	if err != nil {
		return &port.RejectError{Rule: port.RuleObject, Commit: commit, Detail: clip(gitStderr(err), 512)}
	}
	type entry struct{ path, mode, id string }
	var changed []entry
	fields := bytes.Split(out, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(string(fields[i]), ":"))
		p := string(fields[i+1])
		if len(meta) != 5 {
			return &port.RejectError{Rule: port.RuleObject, Commit: commit, Detail: "unexpected diff-tree output"}
		}
		if err := checkPath(p); err != nil {
			err.Commit = commit
			return err
		}
		if g, ok := deny.match(p); ok {
			return &port.RejectError{Rule: port.RuleDenied, Path: p, Commit: commit, Detail: "matches " + g}
		}
		if pol.NoSubmodules && (p == ".gitmodules" || strings.HasSuffix(p, "/.gitmodules") || meta[0] == "160000" || meta[1] == "160000") {
			return &port.RejectError{Rule: port.RuleSubmodule, Path: p, Commit: commit, Detail: "submodules are not allowed"}
		}
		if meta[4] != "D" {
			changed = append(changed, entry{p, meta[1], meta[3]})
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var in bytes.Buffer
	for _, e := range changed {
		if e.mode != "160000" {
			in.WriteString(e.id + "\n")
		}
	}
	sizes, err := r.run(ctx, gitCmd{gitDir: dir, stdin: &in, args: []string{"cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"}})
	if err != nil {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	size := map[string]int64{}
	for line := range strings.Lines(string(sizes)) {
		f := strings.Fields(line)
		if len(f) == 3 {
			n, _ := strconv.ParseInt(f[2], 10, 64)
			size[f[0]] = n
		}
	}
	for _, e := range changed {
		if e.mode == "160000" {
			continue
		}
		n, ok := size[e.id]
		if !ok {
			return &port.RejectError{Rule: port.RuleObject, Path: e.path, Commit: commit, Detail: "missing blob"}
		}
		if n > pol.MaxFileBytes {
			return &port.RejectError{Rule: port.RuleFileSize, Path: e.path, Commit: commit, Detail: fmt.Sprintf("%d bytes, over %d", n, pol.MaxFileBytes)}
		}
		if e.mode == "120000" {
			if n > 4096 {
				return &port.RejectError{Rule: port.RuleSymlink, Path: e.path, Commit: commit, Detail: "symlink target too long"}
			}
			target, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"cat-file", "blob", e.id}})
			if err != nil {
				return fmt.Errorf("%w: %v", port.ErrInternal, err)
			}
			if err := checkSymlink(e.path, string(target)); err != nil {
				err.Commit = commit
				return err
			}
		}
	}
	return nil
}

func checkPolicy(p port.RepoPolicy) error {
	switch {
	case p.MaxCommits < 1 || p.MaxFileBytes < 1 || p.MaxTotalBytes < 1 || p.MaxBundleBytes < 1:
		return port.Invalidf("policy caps must be positive")
	case !strings.HasSuffix(p.BranchPrefix, "/") || checkBranchName(p.BranchPrefix+"x") != nil:
		return port.Invalidf("branch prefix %q must be a valid ref prefix ending in /", p.BranchPrefix)
	}
	if _, err := compileDeny(p.DenyPaths); err != nil {
		return err
	}
	if id := p.Identity.Rewrite; id != nil {
		if err := checkIdentity(*id); err != nil {
			return err
		}
	}
	for _, e := range p.Identity.AllowedEmails {
		if e == "" {
			return port.Invalidf("allowed email pattern is empty")
		}
	}
	return nil
}
