package gitcli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// Clone implements port.RepoRelay. Before anything runs it also refuses, with
// port.ErrInvalidSpec, an exporter (WithExporter) the sandbox user could not run at
// export time (a directory made by os.MkdirTemp, mode 0700, say).
func (r *Relay) Clone(ctx context.Context, req port.CloneRequest) (co *port.Checkout, err error) {
	op := &port.OpError{Op: "gitcli.Clone", RunID: req.RunID}
	fail := func(e error) (*port.Checkout, error) { op.Err = e; return nil, op }
	if err := port.ValidateRunID(req.RunID); err != nil {
		return fail(err)
	}
	u, err := checkURL(req.URL)
	if err != nil {
		return fail(err)
	}
	if req.Branch != "" {
		if err := checkBranchName(req.Branch); err != nil {
			return fail(err)
		}
	}
	if err := checkEmptyDir(req.WorkspaceDir); err != nil {
		return fail(err)
	}
	// The export after the run needs the exporter: say now if it cannot run.
	if err := r.checkExporter(); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Join(r.cfg.cacheDir, "mirrors"), 0o700); err != nil {
		return fail(fmt.Errorf("%w: cache dir: %v", port.ErrInternal, err))
	}
	env, secret, err := r.credentialEnv(ctx, u.String())
	if err != nil {
		return fail(err)
	}

	mirror := r.mirrorDir(u.String())
	unlock, err := r.lockMirror(mirror)
	if err != nil {
		return fail(fmt.Errorf("%w: locking the mirror: %v", port.ErrInternal, err))
	}
	defer unlock()
	if err := r.updateMirror(ctx, mirror, u.String(), env, secret); err != nil {
		return fail(err)
	}
	def, err := r.defaultBranch(ctx, mirror, u.String(), env, secret)
	if err != nil {
		return fail(err)
	}
	branch := req.Branch
	if branch == "" {
		branch = def
	}
	out, err := r.run(ctx, gitCmd{gitDir: mirror, args: []string{"rev-parse", "--verify", "--end-of-options", "refs/heads/" + branch + "^{commit}"}})
	if err != nil {
		return fail(fmt.Errorf("%w: branch %q: %v", port.ErrNotFound, branch, err))
	}
	base := strings.TrimSpace(string(out))

	// --no-local: objects travel through upload-pack into fresh files (no hard link into
	// the mirror); no templates (no sample hooks), no submodules, one branch.
	if _, err := r.run(ctx, gitCmd{args: []string{
		"clone", "--no-local", "--no-hardlinks", "--no-recurse-submodules", "--template=",
		"--single-branch", "--no-tags", "--branch", branch, "--", mirror, req.WorkspaceDir,
	}}); err != nil {
		return fail(fmt.Errorf("%w: clone: %v", port.ErrInternal, err))
	}
	// The clone is still the host's (the agent has not run), so git may write its config.
	wsGit := filepath.Join(req.WorkspaceDir, ".git")
	if _, err := r.run(ctx, gitCmd{gitDir: wsGit, args: []string{"config", "remote.origin.url", u.String()}}); err != nil {
		return fail(fmt.Errorf("%w: %v", port.ErrInternal, err))
	}
	if os.Geteuid() == 0 {
		if err := chownTree(req.WorkspaceDir, r.cfg.uid, r.cfg.gid); err != nil {
			return fail(fmt.Errorf("%w: giving the workspace to the sandbox user: %v", port.ErrInternal, err))
		}
	}
	r.cfg.logger.InfoContext(ctx, "gitcli: cloned", "run_id", req.RunID, "url", u.String(), "branch", branch, "base", base)
	return &port.Checkout{URL: u.String(), Branch: branch, Base: base, DefaultBranch: def}, nil
}

// updateMirror creates the bare mirror of u or fetches into it.
func (r *Relay) updateMirror(ctx context.Context, mirror, u string, env []string, secret string) error {
	if _, err := os.Stat(filepath.Join(mirror, "HEAD")); err != nil {
		tmp := mirror + ".new-" + randHex(4)
		defer os.RemoveAll(tmp)
		steps := [][]string{
			{"init", "--bare", "--template=", "--", tmp},
			{"--git-dir=" + tmp, "config", "remote.origin.url", u},
			{"--git-dir=" + tmp, "config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*"},
			{"--git-dir=" + tmp, "config", "remote.origin.tagOpt", "--no-tags"},
		}
		for _, s := range steps {
			if _, err := r.run(ctx, gitCmd{args: s}); err != nil {
				return fmt.Errorf("%w: creating the mirror: %v", port.ErrInternal, err)
			}
		}
		if err := r.fetchMirror(ctx, tmp, u, env, secret); err != nil {
			return err
		}
		if err := os.Rename(tmp, mirror); err != nil {
			return fmt.Errorf("%w: %v", port.ErrInternal, err)
		}
		return nil
	}
	return r.fetchMirror(ctx, mirror, u, env, secret)
}

func (r *Relay) fetchMirror(ctx context.Context, mirror, u string, env []string, secret string) error {
	_, err := r.run(ctx, gitCmd{gitDir: mirror, env: env, secret: secret, args: append(remoteAllow(u),
		"fetch", "--prune", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head", "--quiet", "origin")})
	if err != nil {
		return fmt.Errorf("fetching %s: %w", u, classifyRemote(err))
	}
	return nil
}

// remoteAllow allows git to speak the remote's protocol (http or https only).
func remoteAllow(u string) []string {
	scheme, _, _ := strings.Cut(u, ":")
	return []string{"-c", "protocol." + scheme + ".allow=always"}
}

// defaultBranch asks the remote which branch HEAD names.
func (r *Relay) defaultBranch(ctx context.Context, mirror, u string, env []string, secret string) (string, error) {
	out, err := r.run(ctx, gitCmd{gitDir: mirror, env: env, secret: secret, args: append(remoteAllow(u), "ls-remote", "--symref", "origin", "HEAD")})
	if err != nil {
		return "", fmt.Errorf("asking %s for its default branch: %w", u, classifyRemote(err))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if ref, ok := strings.CutPrefix(sc.Text(), "ref: refs/heads/"); ok {
			name, _, _ := strings.Cut(ref, "\t")
			if checkBranchName(name) == nil {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s names no default branch", port.ErrNotFound, u)
}

// checkEmptyDir requires an existing, empty, real directory (not a symlink).
func checkEmptyDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return port.Invalidf("workspace dir %q is not absolute", dir)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return port.Invalidf("workspace dir: %v", err)
	}
	if !fi.IsDir() {
		return port.Invalidf("workspace dir %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return port.Invalidf("workspace dir: %v", err)
	}
	if len(ents) != 0 {
		return port.Invalidf("workspace dir %s is not empty", dir)
	}
	return nil
}

// chownTree gives the fresh clone to the sandbox user, never following a link.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
