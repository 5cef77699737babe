package gitcli

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/agentsandbox/sandbox/port"
)

// What a pushed branch does to whoever clones it. A path is safe on the host that
// validates it, but a checkout on another file system reads names its own way:
// NTFS drops trailing dots and spaces, reads "name:stream" as name, answers to 8.3
// short names (GIT~1) and takes '\' for a separator; HFS+ ignores some code points
// altogether and compares names case-insensitively; APFS and HFS+ compare them
// normalised (NFD and NFC alike). So ".git" is matched in every spelling git's own
// path protections refuse (its is_ntfs_dotgit and is_hfs_dotgit), for directories
// and symlink targets alike, and DenyPaths are matched as those file systems would
// read the path: case-folded, normalised, without ignorable code points, trailing
// dots and spaces or streams, '\' as a separator, and any element that could be an
// NTFS short name refused (it may stand for a denied directory).

// isDotGit reports a path element some file system reads as ".git": in any case,
// with HFS+'s ignorable code points anywhere in it (".g\u200cit"), trailing dots or
// spaces (".git. "), an NTFS stream (".git::$INDEX_ALLOCATION"), or the NTFS short
// name git~N (git refuses git~1, the name .git gets; any N is refused here).
func isDotGit(el string) bool {
	el = ntfsName(dropIgnorable(el))
	if strings.EqualFold(el, ".git") {
		return true
	}
	return len(el) > 4 && strings.EqualFold(el[:4], "git~") && allDigits(el[4:])
}

// ntfsName is the name NTFS gives an element: before a stream's ':', without
// trailing dots and spaces.
func ntfsName(el string) string {
	if i := strings.IndexByte(el, ':'); i >= 0 {
		el = el[:i]
	}
	return strings.TrimRight(el, ". ")
}

// dropIgnorable removes the code points HFS+ ignores when it compares names.
func dropIgnorable(s string) string {
	if !strings.ContainsFunc(s, hfsIgnorable) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if hfsIgnorable(r) {
			return -1
		}
		return r
	}, s)
}

// hfsIgnorable are the code points HFS+ drops when it compares names (the list git
// checks: zero-width joiners and marks, directional embeddings and overrides, the
// deprecated format characters, the byte-order mark).
func hfsIgnorable(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// elements splits a path at '/' and '\' (NTFS's separator).
func elements(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' })
}

// checkPath refuses a path element that is empty, ".", ".." or ".git" (in any
// spelling isDotGit knows), and absolute paths or NUL bytes. Elements are taken
// between '/' and also between '\': a checkout on NTFS reads both as separators.
func checkPath(p string) *port.RejectError {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return &port.RejectError{Rule: port.RulePath, Path: p, Detail: "absolute or empty path"}
	}
	for _, el := range strings.Split(p, "/") {
		if el == "" || el == "." || el == ".." {
			return &port.RejectError{Rule: port.RulePath, Path: p, Detail: fmt.Sprintf("path element %q", el)}
		}
	}
	for _, el := range elements(p) {
		switch {
		case el == "." || el == "..":
			return &port.RejectError{Rule: port.RulePath, Path: p, Detail: fmt.Sprintf("path element %q (read with '\\' as a separator)", el)}
		case isDotGit(el):
			return &port.RejectError{Rule: port.RulePath, Path: p, Detail: "a .git path element"}
		}
	}
	return nil
}

// checkSymlink refuses a link whose target is absolute, leaves the repository or
// enters .git, read as POSIX reads it and as Windows does ('\' a separator, a drive
// letter absolute), with .git in every spelling isDotGit knows.
func checkSymlink(p, target string) *port.RejectError {
	bad := func(why string) *port.RejectError {
		return &port.RejectError{Rule: port.RuleSymlink, Path: p, Detail: fmt.Sprintf("target %q %s", clip(target, 256), why)}
	}
	if target == "" || strings.ContainsRune(target, 0) {
		return bad("is empty or has NUL")
	}
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, `\`) || len(target) >= 2 && target[1] == ':' && isLetter(target[0]) {
		return bad("is absolute")
	}
	for _, t := range []string{target, strings.ReplaceAll(target, `\`, "/")} {
		full := path.Join(path.Dir(p), t)
		if full == ".." || strings.HasPrefix(full, "../") {
			return bad("leaves the repository")
		}
		for _, el := range elements(full) {
			if el == ".." {
				return bad("leaves the repository")
			}
			if isDotGit(el) {
				return bad("points into .git")
			}
		}
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// denyRules are the policy's DenyPaths, compiled to match paths as case-insensitive,
// normalising file systems read them.
type denyRules struct {
	globs []string
	res   []*regexp.Regexp
}

// compileDeny compiles deny patterns: "**" matches any run of path elements
// (including none), "*" and "?" stay within one element.
func compileDeny(globs []string) (*denyRules, error) {
	d := &denyRules{globs: globs}
	for _, g := range globs {
		if g == "" || strings.HasPrefix(g, "/") {
			return nil, port.Invalidf("deny pattern %q is empty or absolute", g)
		}
		re, err := globRegexp(denyKey(g))
		if err != nil {
			return nil, err
		}
		d.res = append(d.res, re)
	}
	return d, nil
}

// match returns the pattern p falls under, if any.
func (d *denyRules) match(p string) (string, bool) {
	if len(d.res) == 0 {
		return "", false
	}
	k := denyKey(p)
	for i, re := range d.res {
		if re.MatchString(k) {
			return d.globs[i], true
		}
	}
	for _, el := range elements(p) {
		if shortName(ntfsName(dropIgnorable(el))) {
			return "(an NTFS short name, which may stand for a denied directory)", true
		}
	}
	return "", false
}

var folder = cases.Fold()

// denyKey is a path as a case-insensitive, normalising file system compares it:
// '\' a separator, each element without ignorable code points, stream or trailing
// dots and spaces, canonically decomposed, case-folded, then composed (NFC).
func denyKey(p string) string {
	els := elements(p)
	for i, el := range els {
		el = ntfsName(dropIgnorable(el))
		els[i] = norm.NFC.String(folder.String(norm.NFD.String(el)))
	}
	return strings.Join(els, "/")
}

// shortName reports an element in the form of an NTFS 8.3 short name (up to six
// characters, '~', a number; an extension of up to three), such as GITHUB~1.
var shortNameRe = regexp.MustCompile(`^[^~.]{1,6}~[0-9]{1,6}(\.[^.]{0,3})?$`)

func shortName(el string) bool {
	base, _, _ := strings.Cut(el, ".")
	return len(base) <= 8 && shortNameRe.MatchString(el)
}

func globRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); {
		switch {
		case strings.HasPrefix(g[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 3
		case strings.HasPrefix(g[i:], "**"):
			b.WriteString(".*")
			i += 2
		case g[i] == '*':
			b.WriteString("[^/]*")
			i++
		case g[i] == '?':
			b.WriteString("[^/]")
			i++
		default:
			_, n := utf8.DecodeRuneInString(g[i:])
			b.WriteString(regexp.QuoteMeta(g[i : i+n]))
			i += n
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
