package gitcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/port"
)

// Paths inside the export sandbox.
const (
	exportSrc    = "/src"
	exportOut    = "/out"
	exportBinDir = "/.agentsandbox-git"
	bundleName   = "export.bundle"
)

// exporterReport is the exporter's stdout. It comes from a process that read hostile
// data, so it only ever explains a refusal; the host decides from the bundle alone.
type exporterReport struct {
	Tip    string `json:"tip"`
	Bundle bool   `json:"bundle"`
	Error  string `json:"error"`
	Rule   string `json:"rule"`
	Path   string `json:"path"`
}

// Export implements port.RepoRelay.
func (r *Relay) Export(ctx context.Context, req port.ExportRequest) (*port.Export, error) {
	op := &port.OpError{Op: "gitcli.Export", RunID: req.RunID}
	fail := func(e error) (*port.Export, error) { op.Err = e; return nil, op }
	if err := checkExportRequest(req); err != nil {
		return fail(err)
	}
	if r.cfg.exporter == "" {
		return fail(port.Invalidf("no exporter binary configured (WithExporter)"))
	}
	pol := req.Policy.WithDefaults()
	if err := checkPolicy(pol); err != nil {
		return fail(err)
	}
	if fi, err := os.Lstat(req.WorkspaceDir); err != nil || !fi.IsDir() {
		return fail(port.Invalidf("workspace dir %s is not a directory", req.WorkspaceDir))
	}
	bundle, err := r.runExporter(ctx, req, pol)
	if err != nil {
		return fail(err)
	}
	exp := &port.Export{RunID: req.RunID, Checkout: req.Checkout, Tip: req.Checkout.Base}
	if bundle == "" {
		return exp, nil
	}
	exp.Bundle = bundle
	q, err := r.ingest(ctx, req.RunID, req.Checkout, pol, bundle)
	if q != nil {
		defer q.remove()
	}
	if err != nil {
		return fail(err)
	}
	exp.Tip, exp.Commits = q.tip, q.commits
	r.cfg.logger.InfoContext(ctx, "gitcli: exported", "run_id", req.RunID, "tip", exp.Tip, "commits", len(exp.Commits), "bundle", bundle)
	return exp, nil
}

func checkExportRequest(req port.ExportRequest) error {
	if err := port.ValidateRunID(req.RunID); err != nil {
		return err
	}
	if err := checkCheckout(req.Checkout); err != nil {
		return err
	}
	if req.Image == "" {
		return port.Invalidf("export image is empty")
	}
	if !filepath.IsAbs(req.WorkspaceDir) {
		return port.Invalidf("workspace dir %q is not absolute", req.WorkspaceDir)
	}
	return nil
}

func checkCheckout(co port.Checkout) error {
	if _, err := checkURL(co.URL); err != nil {
		return err
	}
	if !isHex40(co.Base) {
		return port.Invalidf("checkout base %q is not a full commit id", co.Base)
	}
	return checkBranchName(co.Branch)
}

// runExporter runs the exporter in a sandbox and copies the bundle it wrote into a
// host-owned artefact file, returning its path ("" when there were no commits).
func (r *Relay) runExporter(ctx context.Context, req port.ExportRequest, pol port.RepoPolicy) (string, error) {
	work, err := r.scratchDir("export", req.RunID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	defer os.RemoveAll(work)
	out := filepath.Join(work, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	if os.Geteuid() == 0 {
		err = os.Chown(out, r.cfg.uid, r.cfg.gid)
	} else {
		err = os.Chmod(out, 0o777)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	bin := filepath.Base(r.cfg.exporter)
	spec := port.RunSpec{
		RunID: req.RunID,
		Image: req.Image,
		Argv: []string{exportBinDir + "/" + bin,
			"-src", exportSrc, "-out", exportOut + "/" + bundleName,
			"-base", req.Checkout.Base, "-branch", req.Checkout.Branch,
			"-max-commits", fmt.Sprint(pol.MaxCommits),
			"-max-file-bytes", fmt.Sprint(pol.MaxFileBytes),
			"-max-bytes", fmt.Sprint(pol.MaxTotalBytes)},
		Env: map[string]string{"PATH": "/"},
		Mounts: []port.Mount{
			{Source: req.WorkspaceDir, Target: exportSrc},
			{Source: out, Target: exportOut, Writable: true},
			{Source: filepath.Dir(r.cfg.exporter), Target: exportBinDir},
		},
		Limits:      r.cfg.exportLimits,
		User:        r.cfg.sandboxUser,
		OutputLimit: 64 << 10,
	}
	if spec.Limits.Timeout == 0 {
		spec.Limits.Timeout = r.cfg.exportTimeout
	}
	res, err := r.runner.RunOnce(ctx, spec)
	if err != nil {
		return "", fmt.Errorf("export sandbox: %w", err)
	}
	var rep exporterReport
	_ = json.Unmarshal(firstLine(res.Stdout), &rep)
	switch res.ExitCode {
	case 0:
	case 2:
		rule := port.Rule(rep.Rule)
		switch rule {
		case port.RuleLayout, port.RuleBranch, port.RuleAncestry, port.RuleCommitCount, port.RuleFileSize, port.RuleTotalSize:
		default:
			rule = port.RuleLayout
		}
		return "", &port.RejectError{Rule: rule, Path: clip(rep.Path, 512), Detail: "exporter: " + clip(rep.Error, 512)}
	default:
		return "", &port.RejectError{Rule: port.RuleLayout, Detail: fmt.Sprintf("exporter exited %d: %s", res.ExitCode, clip(rep.Error+string(res.Stderr), 512))}
	}

	return r.copyArtefact(out, req.RunID, pol)
}

// copyArtefact copies the bundle the exporter wrote into out (a regular file within
// the policy's cap, opened without following links) into a host-owned artefact
// file, returning its path ("" when there is none: no commits).
func (r *Relay) copyArtefact(out, runID string, pol port.RepoPolicy) (string, error) {
	root, err := os.OpenRoot(out)
	if err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	defer root.Close()
	fi, err := root.Lstat(bundleName)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // the branch is still at the base
	}
	if err != nil || !fi.Mode().IsRegular() {
		return "", &port.RejectError{Rule: port.RuleLayout, Detail: "the export is not a regular file"}
	}
	if fi.Size() > pol.MaxBundleBytes {
		return "", &port.RejectError{Rule: port.RuleTotalSize, Detail: fmt.Sprintf("artefact is %d bytes, over %d", fi.Size(), pol.MaxBundleBytes)}
	}
	f, err := root.OpenFile(bundleName, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return "", &port.RejectError{Rule: port.RuleLayout, Detail: "the export cannot be opened"}
	}
	defer f.Close()
	dir := filepath.Join(r.cfg.cacheDir, "artefacts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	dst, err := os.CreateTemp(dir, runID+"-*.bundle")
	if err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	n, err := io.Copy(dst, io.LimitReader(f, pol.MaxBundleBytes+1))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil || n > pol.MaxBundleBytes {
		os.Remove(dst.Name())
		if err == nil {
			return "", &port.RejectError{Rule: port.RuleTotalSize, Detail: "artefact grew past its cap"}
		}
		return "", fmt.Errorf("%w: copying the artefact: %v", port.ErrInternal, err)
	}
	return dst.Name(), nil
}

func firstLine(b []byte) []byte {
	s, _, _ := strings.Cut(string(b), "\n")
	return []byte(s)
}

// clip shortens untrusted text for an error (at a character boundary) and escapes
// every byte that does not print as itself (port.EscapeText).
func clip(s string, n int) string {
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return port.EscapeText(s[:n]) + "…"
	}
	return port.EscapeText(s)
}
