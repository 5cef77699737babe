package gitcli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

// branchRe is a conservative subset of git-check-ref-format: ASCII letters, digits and
// "._-/", no empty, "." or ".."-bearing element, no ".lock" suffix.
var branchRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$`)

func checkBranchName(b string) error {
	if len(b) > 200 || !branchRe.MatchString(b) || strings.Contains(b, "..") || strings.HasSuffix(b, ".lock") ||
		strings.Contains(b, ".lock/") || strings.HasSuffix(b, ".") || b == "HEAD" {
		return port.Invalidf("branch name %q is not allowed", b)
	}
	return nil
}

// Push implements port.RepoRelay.
func (r *Relay) Push(ctx context.Context, req port.PushRequest) (*port.PushResult, error) {
	exp := req.Export
	op := &port.OpError{Op: "gitcli.Push", RunID: exp.RunID}
	fail := func(e error) (*port.PushResult, error) { op.Err = e; return nil, op }
	if err := port.ValidateRunID(exp.RunID); err != nil {
		return fail(err)
	}
	if err := checkCheckout(exp.Checkout); err != nil {
		return fail(err)
	}
	pol := req.Policy.WithDefaults()
	if err := checkPolicy(pol); err != nil {
		return fail(err)
	}
	if exp.Bundle == "" {
		return fail(port.Invalidf("the export has no commits to push"))
	}
	branch := req.Branch
	if branch == "" {
		branch = pol.BranchPrefix + exp.RunID
	}
	if err := checkPushBranch(branch, exp.Checkout, pol, req.Force); err != nil {
		return fail(err)
	}
	q, err := r.ingest(ctx, exp.RunID, exp.Checkout, pol, exp.Bundle)
	if q != nil {
		defer q.remove()
	}
	if err != nil {
		return fail(err)
	}
	env, secret, err := r.credentialEnv(ctx, exp.Checkout.URL)
	if err != nil {
		return fail(err)
	}
	refspec := q.tip + ":refs/heads/" + branch
	if req.Force {
		refspec = "+" + refspec
	}
	_, err = r.run(ctx, gitCmd{gitDir: q.dir, env: env, secret: secret, args: append(remoteAllow(exp.Checkout.URL),
		"push", "--no-verify", "--quiet", "--no-recurse-submodules", "--", exp.Checkout.URL, refspec)})
	if err != nil {
		st := 0
		if ge := (*gitError)(nil); errors.As(err, &ge) {
			st = remoteStatus(ge.stderr)
		}
		return fail(&port.PushError{Branch: branch, Bundle: exp.Bundle, Err: classifyRemote(err), Status: st})
	}
	r.cfg.logger.InfoContext(ctx, "gitcli: pushed", "run_id", exp.RunID, "branch", branch, "tip", q.tip, "commits", len(q.commits))
	return &port.PushResult{URL: exp.Checkout.URL, Branch: branch, Tip: q.tip, Commits: q.commits}, nil
}

// checkPushBranch allows only a branch under the prefix that is neither the remote's
// default branch nor the checkout's base branch; a forced push needs the policy's leave.
func checkPushBranch(branch string, co port.Checkout, pol port.RepoPolicy, force bool) error {
	bad := func(why string) error {
		return &port.RejectError{Rule: port.RulePushBranch, Path: branch, Detail: why}
	}
	if err := checkBranchName(branch); err != nil {
		return bad("not a valid branch name")
	}
	if !strings.HasPrefix(branch, pol.BranchPrefix) || len(branch) == len(pol.BranchPrefix) {
		return bad(fmt.Sprintf("not under the prefix %q", pol.BranchPrefix))
	}
	if branch == co.DefaultBranch || branch == co.Branch {
		return bad("the default or base branch")
	}
	if force && !pol.AllowForce {
		return bad("a forced push is not allowed by the policy")
	}
	return nil
}
