package gitcli

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentsandbox/sandbox/port"
)

func checkIdentity(id port.Identity) error {
	if id.Name == "" || id.Email == "" || strings.ContainsAny(id.Name+id.Email, "<>\n\x00") {
		return port.Invalidf("identity %q <%s> is empty or has <, >, newline or NUL", id.Name, id.Email)
	}
	return nil
}

// checkIdentities refuses a commit whose author or committer email matches no pattern.
func (r *Relay) checkIdentities(ctx context.Context, dir, tip, base string, allowed []string) error {
	var res []*regexp.Regexp
	for _, a := range allowed {
		res = append(res, regexp.MustCompile("^(?i)"+strings.ReplaceAll(regexp.QuoteMeta(a), `\*`, ".*")+"$"))
	}
	out, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"log", "-z", "--no-show-signature", "--format=%H%x1f%ae%x1f%ce", tip, "^" + base}})
	if err != nil {
		return fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	ok := func(e string) bool {
		for _, re := range res {
			if re.MatchString(e) {
				return true
			}
		}
		return false
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		f := strings.Split(strings.TrimSpace(rec), "\x1f")
		if len(f) != 3 {
			continue
		}
		for _, e := range f[1:] {
			if !ok(e) {
				return &port.RejectError{Rule: port.RuleIdentity, Commit: f[0], Detail: fmt.Sprintf("email %q is not allowed", clip(e, 256))}
			}
		}
	}
	return nil
}

// rewrite re-creates base..tip with id as author and committer, keeping trees, times,
// messages and the shape of the history; signatures are dropped (they would no longer
// verify). It returns the new tip. The same input always gives the same commits.
func (r *Relay) rewrite(ctx context.Context, dir, tip, base string, id port.Identity) (string, error) {
	list, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"rev-list", "--reverse", "--topo-order", tip, "^" + base}})
	if err != nil {
		return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
	}
	mapped := map[string]string{}
	newTip := tip
	for line := range strings.Lines(string(list)) {
		old := strings.TrimSpace(line)
		raw, err := r.run(ctx, gitCmd{gitDir: dir, args: []string{"cat-file", "commit", old}})
		if err != nil {
			return "", fmt.Errorf("%w: %v", port.ErrInternal, err)
		}
		head, msg, _ := bytes.Cut(raw, []byte("\n\n"))
		var b bytes.Buffer
		skipping := false
		for _, h := range strings.Split(string(head), "\n") {
			if strings.HasPrefix(h, " ") { // continuation of a multi-line header
				if !skipping {
					b.WriteString(h + "\n")
				}
				continue
			}
			key, val, _ := strings.Cut(h, " ")
			skipping = false
			switch key {
			case "parent":
				if n, ok := mapped[val]; ok {
					val = n
				}
				b.WriteString("parent " + val + "\n")
			case "author", "committer":
				// Keep "<time> <zone>", the last two fields.
				f := strings.Fields(val)
				if len(f) < 2 {
					return "", &port.RejectError{Rule: port.RuleObject, Commit: old, Detail: "malformed " + key}
				}
				fmt.Fprintf(&b, "%s %s <%s> %s %s\n", key, id.Name, id.Email, f[len(f)-2], f[len(f)-1])
			case "gpgsig", "gpgsig-sha256", "mergetag":
				skipping = true
			default:
				b.WriteString(h + "\n")
			}
		}
		b.WriteString("\n")
		b.Write(msg)
		out, err := r.run(ctx, gitCmd{gitDir: dir, stdin: &b, args: []string{"hash-object", "-t", "commit", "-w", "--stdin"}})
		if err != nil {
			return "", &port.RejectError{Rule: port.RuleObject, Commit: old, Detail: "rewriting: " + clip(gitStderr(err), 256)}
		}
		mapped[old] = strings.TrimSpace(string(out))
		newTip = mapped[old]
	}
	return newTip, nil
}
