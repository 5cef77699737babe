package gitcli

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
)

// host is a scratch repository of the test's (standing in for what an exporter, honest
// or not, would have read) and a relay whose mirror holds its base commit.
type host struct {
	t     *testing.T
	r     *Relay
	src   string
	co    port.Checkout
	tmp   string
	nfile int
}

func newHost(t *testing.T) *host {
	testenv.NeedCommand(t, "git", "git")
	h := &host{t: t, src: t.TempDir(), tmp: t.TempDir()}
	h.git("init", "-q", "-b", "main")
	h.commit("seed.txt", "seed")
	base := h.git("rev-parse", "HEAD")
	cache := t.TempDir()
	r, err := NewRelay(stubRunner{}, WithCacheDir(cache))
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	h.co = port.Checkout{URL: "https://git.example/acme/widgets.git", Branch: "main", Base: base, DefaultBranch: "main"}
	os.MkdirAll(filepath.Join(cache, "mirrors"), 0o700)
	if out, err := exec.Command("git", "clone", "-q", "--bare", h.src, r.mirrorDir(h.co.URL)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return h
}

type stubRunner struct{}

func (stubRunner) RunOnce(context.Context, port.RunSpec) (*port.RunResult, error) {
	return nil, errors.New("not used")
}

func (h *host) git(args ...string) string {
	h.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = h.src
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=A", "GIT_COMMITTER_EMAIL=a@example.com",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (h *host) commit(name, content string) string {
	h.t.Helper()
	os.WriteFile(filepath.Join(h.src, name), []byte(content), 0o644)
	h.git("add", name)
	h.git("commit", "-q", "-m", "c "+name)
	return h.git("rev-parse", "HEAD")
}

// bundle writes a bundle with the given header lines and the pack of revs.
func (h *host) bundle(header []string, revs ...string) string {
	h.t.Helper()
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs", "-q")
	cmd.Dir = h.src
	cmd.Stdin = strings.NewReader(strings.Join(revs, "\n") + "\n")
	pack, err := cmd.Output()
	if err != nil {
		h.t.Fatal(err)
	}
	return h.raw(header, pack)
}

func (h *host) raw(header []string, pack []byte) string {
	var b bytes.Buffer
	b.WriteString("# v2 git bundle\n")
	for _, l := range header {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	b.Write(pack)
	h.nfile++
	p := filepath.Join(h.tmp, "b"+string(rune('a'+h.nfile))+".bundle")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *host) ingest(pol port.RepoPolicy, bundle string) (*quarantine, error) {
	q, err := h.r.ingest(context.Background(), "run-1", h.co, pol.WithDefaults(), bundle)
	if q != nil {
		h.t.Cleanup(q.remove)
	}
	return q, err
}

func wantRule(t *testing.T, err error, rule port.Rule) {
	t.Helper()
	var re *port.RejectError
	if !errors.As(err, &re) || re.Rule != rule || !errors.Is(err, port.ErrRejected) {
		t.Fatalf("err = %v, want rule %s", err, rule)
	}
}

// pack builds a version 2 pack from raw entries (a bundle's exporter may lie).
func pack(entries ...[]byte) []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(entries)))
	for _, e := range entries {
		b.Write(e)
	}
	b.Write(make([]byte, 20)) // trailer; the scan refuses before git checks it
	return b.Bytes()
}

// entry is a pack entry of typ declaring size, followed by prefix and the zlib
// stream of data.
func entry(typ int, size uint64, prefix, data []byte) []byte {
	var b bytes.Buffer
	c := byte(typ<<4) | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		b.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	b.WriteByte(c)
	b.Write(prefix)
	zw := zlib.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

func TestIngestValidBundle(t *testing.T) {
	h := newHost(t)
	h.commit("a.txt", "a")
	tip := h.commit("b.txt", "b")
	q, err := h.ingest(port.RepoPolicy{}, h.bundle([]string{"-" + h.co.Base, tip + " refs/heads/main"}, tip, "^"+h.co.Base))
	if err != nil {
		t.Fatal(err)
	}
	if q.tip != tip || len(q.commits) != 2 || q.commits[0] != tip {
		t.Fatalf("tip %s commits %v", q.tip, q.commits)
	}
}

// TestIngestRefusesLyingBundles: what the exporter writes is checked again by the host,
// so a compromised exporter gains nothing.
func TestIngestRefusesLyingBundles(t *testing.T) {
	h := newHost(t)
	h.commit("a.txt", "a")
	h.commit("b.txt", "b")
	tip := h.commit("c.txt", "c")
	rev := []string{tip, "^" + h.co.Base}
	ok := []string{"-" + h.co.Base, tip + " refs/heads/main"}
	zeros := bytes.Repeat([]byte{0}, 9<<20)

	h.git("checkout", "-q", "--orphan", "orphan")
	orphan := h.commit("o.txt", "o")

	cases := []struct {
		name   string
		pol    port.RepoPolicy
		bundle string
		rule   port.Rule
	}{
		{"another ref", port.RepoPolicy{}, h.bundle([]string{"-" + h.co.Base, tip + " refs/heads/other"}, rev...), port.RuleBranch},
		{"two refs", port.RepoPolicy{}, h.bundle([]string{"-" + h.co.Base, tip + " refs/heads/main", tip + " refs/heads/main"}, rev...), port.RuleBranch},
		{"prerequisite other than the base", port.RepoPolicy{}, h.bundle([]string{"-" + tip, tip + " refs/heads/main"}, rev...), port.RuleAncestry},
		{"tip not descending from the base", port.RepoPolicy{}, h.bundle([]string{"-" + h.co.Base, orphan + " refs/heads/main"}, orphan), port.RuleAncestry},
		{"too many commits", port.RepoPolicy{MaxCommits: 2}, h.bundle(ok, rev...), port.RuleCommitCount},
		{"1 GiB blob declared", port.RepoPolicy{}, h.raw(ok, pack(entry(3, 1<<30, nil, []byte("tiny")))), port.RuleFileSize},
		{"blob inflating past its declared size", port.RepoPolicy{}, h.raw(ok, pack(entry(3, 5, nil, zeros))), port.RuleObject},
		{"delta expanding to 1 TiB", port.RepoPolicy{}, h.raw(ok, pack(entry(7, 12, make([]byte, 20), binary.AppendUvarint(binary.AppendUvarint(nil, 10), 1<<40)))), port.RuleFileSize},
		{"objects over the total", port.RepoPolicy{MaxTotalBytes: 20 << 20}, h.raw(ok, pack(entry(3, 9<<20, nil, zeros), entry(3, 9<<20, nil, zeros), entry(3, 9<<20, nil, zeros))), port.RuleTotalSize},
		{"no ref at all", port.RepoPolicy{}, h.raw(nil, []byte("#!/bin/sh\n")), port.RuleBranch},
		{"artefact over its cap", port.RepoPolicy{MaxBundleBytes: 100}, h.bundle(ok, rev...), port.RuleTotalSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.ingest(c.pol, c.bundle)
			wantRule(t, err, c.rule)
		})
	}
}

// TestIngestRewritesIdentity: a rewrite keeps trees, messages and times, replaces
// author and committer, and gives the same commits every time (Export and Push agree).
func TestIngestRewritesIdentity(t *testing.T) {
	h := newHost(t)
	h.commit("a.txt", "a")
	tip := h.commit("b.txt", "b")
	b := h.bundle([]string{"-" + h.co.Base, tip + " refs/heads/main"}, tip, "^"+h.co.Base)
	pol := port.RepoPolicy{Identity: port.IdentityPolicy{Rewrite: &port.Identity{Name: "Sandbox Bot", Email: "bot@corp.example"}, AllowedEmails: []string{"nobody@x"}}}
	q1, err := h.ingest(pol, b)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := h.ingest(pol, b)
	if err != nil {
		t.Fatal(err)
	}
	if q1.tip == tip || q1.tip != q2.tip || len(q1.commits) != 2 {
		t.Fatalf("rewritten tip %s (again %s), original %s, commits %v", q1.tip, q2.tip, tip, q1.commits)
	}
	out, err := h.r.run(context.Background(), gitCmd{gitDir: q1.dir, args: []string{"log", "--format=%an <%ae>|%cn <%ce>|%ad|%s|%T", q1.tip, "^" + h.co.Base}})
	if err != nil {
		t.Fatal(err)
	}
	orig := h.git("log", "--format=%ad|%s|%T", tip, "^"+h.co.Base)
	var got []string
	for line := range strings.Lines(string(out)) {
		f := strings.SplitN(strings.TrimSpace(line), "|", 3)
		if f[0] != "Sandbox Bot <bot@corp.example>" || f[1] != "Sandbox Bot <bot@corp.example>" {
			t.Fatalf("identity not rewritten: %s", line)
		}
		got = append(got, f[2])
	}
	if strings.Join(got, "\n") != orig {
		t.Fatalf("trees, times or messages changed:\n%s\nwant\n%s", strings.Join(got, "\n"), orig)
	}
}

func TestCheckPathAndSymlink(t *testing.T) {
	for _, p := range []string{"a/../b", "..", "./a", "a//b", "/etc/passwd", ".git/config", "x/.GIT/hooks", ".git./x", "a/.git "} {
		if checkPath(p) == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	for _, p := range []string{"a/b", ".github/workflows/ci.yml", "a/.gitignore", "a..b"} {
		if err := checkPath(p); err != nil {
			t.Errorf("path %q refused: %v", p, err)
		}
	}
	for _, c := range []struct{ path, target string }{{"a", "/etc/shadow"}, {"a/b", "../../x"}, {"a", ".."}, {"a", ".git/config"}, {"a", ""}} {
		if checkSymlink(c.path, c.target) == nil {
			t.Errorf("symlink %s -> %s accepted", c.path, c.target)
		}
	}
	for _, c := range []struct{ path, target string }{{"a/b", "../c"}, {"a", "b/c"}, {"a/b/c", "../../d"}} {
		if err := checkSymlink(c.path, c.target); err != nil {
			t.Errorf("symlink %s -> %s refused: %v", c.path, c.target, err)
		}
	}
}

func TestDenyGlobs(t *testing.T) {
	d, err := compileDeny([]string{".github/workflows/**", "**/*.pem", "secrets/?.txt", "docs/café/**"})
	if err != nil {
		t.Fatal(err)
	}
	match := func(p string) bool { _, ok := d.match(p); return ok }
	for _, p := range []string{".github/workflows/ci.yml", ".github/workflows/a/b.yml", "key.pem", "a/b/key.pem", "secrets/a.txt", "docs/café/x"} {
		if !match(p) {
			t.Errorf("%q not denied", p)
		}
	}
	for _, p := range []string{".github/dependabot.yml", "key.pem.txt", "secrets/ab.txt", "github/workflows/x", "docs/cafe/x"} {
		if match(p) {
			t.Errorf("%q denied", p)
		}
	}
}

// TestDenyPathsAsFileSystemsReadThem: a denied path in any spelling a checkout's
// file system reads as that path is denied too: other letter case (NTFS, APFS and
// HFS+ compare names case-insensitively), Unicode NFD or NFC, HFS+'s ignorable code
// points, NTFS's trailing dots and spaces, streams, '\' separators and short names.
// Before, DenyPaths matched byte for byte.
func TestDenyPathsAsFileSystemsReadThem(t *testing.T) {
	d, err := compileDeny([]string{".github/workflows/**", "docs/café/**", "CODEOWNERS"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		".GitHub/Workflows/ci.yml", ".GITHUB/WORKFLOWS/CI.YML",
		"docs/cafe\u0301/x", "DOCS/CAFÉ/x", "docs/CAFE\u0301/x",
		".github\u200c/workflows/ci.yml", ".git\u200dhub/workflows/ci.yml",
		".github./workflows/ci.yml", ".github /workflows. /ci.yml",
		".github/workflows:stream/ci.yml", "codeowners::$DATA", "CODEOWNERS.",
		".github\\workflows\\ci.yml",
		"GITHUB~1/workflows/ci.yml", ".github/WORKFL~1/ci.yml",
	} {
		if _, ok := d.match(p); !ok {
			t.Errorf("%q not denied", p)
		}
	}
	for _, p := range []string{".github/dependabot.yml", "docs/cafe/x", "src/codeowners.go", "a~b/c"} {
		if g, ok := d.match(p); ok {
			t.Errorf("%q denied by %s", p, g)
		}
	}
}

// TestDotGitLookalikes: ".git" in every spelling git's own path protections refuse
// (NTFS: trailing dots and spaces, streams, git~N, '\' separators; HFS+: ignorable
// code points; any case), as a path element and in a symlink's target alike. Before,
// a symlink's target was compared with ".git" case-insensitively only.
func TestDotGitLookalikes(t *testing.T) {
	spellings := []string{".git", ".GIT", ".git.", ".git ", ".git. .", "git~1", "GIT~1", "Git~2", ".git::$INDEX_ALLOCATION",
		".git:stream", ".g\u200cit", "\u200e.git", ".gi\u202et", ".git\ufeff"}
	for _, sp := range spellings {
		if checkPath(sp+"/config") == nil {
			t.Errorf("path %q accepted", sp+"/config")
		}
		for _, c := range []struct{ path, target string }{
			{"link", sp}, {"link", sp + "/config"}, {"a/link", "../" + sp + "/hooks"}, {"a/link", "..\\" + sp + "\\hooks"},
		} {
			if checkSymlink(c.path, c.target) == nil {
				t.Errorf("symlink %s -> %q accepted", c.path, c.target)
			}
		}
	}
	for _, c := range []struct{ path, target string }{{"a", "C:\\Windows"}, {"a", "\\\\server\\share"}, {"a/b", "..\\..\\x"}, {"a", "c:x"}} {
		if checkSymlink(c.path, c.target) == nil {
			t.Errorf("symlink %s -> %q accepted", c.path, c.target)
		}
	}
	for _, ok := range []string{".gitignore", ".github", "git", "git~", "git~x", "my.git", ".gits"} {
		if err := checkPath(ok + "/x"); err != nil {
			t.Errorf("path %q refused: %v", ok, err)
		}
		if err := checkSymlink("link", ok+"/x"); err != nil {
			t.Errorf("symlink to %q refused: %v", ok, err)
		}
	}
}

// TestAgentBytesEscaped: control and format characters an agent put in a name (C1
// controls, bidirectional overrides, bytes that are not UTF-8) are escaped in the
// error, never written raw. Before, only C0 and DEL were masked.
func TestAgentBytesEscaped(t *testing.T) {
	name := "ok\u202egpj.exe\u0085\x9b[31m\xff"
	for _, err := range []error{
		checkSymlink("docs/"+name, "../"+name+"/.git"),
		checkPath(name + "/.git/x"),
		&port.RejectError{Rule: port.RuleLayout, Path: name, Detail: "exporter: " + clip(name, 512)},
	} {
		if err == nil {
			t.Fatal("accepted")
		}
		msg := err.Error()
		for _, bad := range []string{"\u202e", "\u0085", "\x9b", "\xff"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%q reached the error raw: %q", bad, msg)
			}
		}
		if !strings.Contains(msg, `\u202e`) {
			t.Errorf("the override is not spelled out: %q", msg)
		}
	}
}
