package gitcli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func TestNewRelayOptions(t *testing.T) {
	if _, err := NewRelay(nil); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil runner: %v", err)
	}
	for name, o := range map[string]Option{
		"relative cache":    WithCacheDir("cache"),
		"relative exporter": WithExporter("bin/x"),
		"nil credentials":   WithCredentials(nil),
		"nil logger":        WithLogger(nil),
		"root user":         WithSandboxUser("0:0"),
		"named user":        WithSandboxUser("agent"),
		"empty git":         WithGit(""),
	} {
		if _, err := NewRelay(stubRunner{}, o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
	r, err := NewRelay(stubRunner{}, WithSandboxUser("2000:3000"))
	if err != nil || r.cfg.uid != 2000 || r.cfg.gid != 3000 {
		t.Fatalf("uid:gid %d:%d, %v", r.cfg.uid, r.cfg.gid, err)
	}
}

// Clone refuses, before any I/O on a remote, a URL carrying a credential (without
// echoing it), other schemes, and a workspace that is not an empty real directory.
func TestCloneRefusals(t *testing.T) {
	r, err := NewRelay(stubRunner{}, WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	empty := t.TempDir()
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(empty, link)
	const secret = "s3cr3t-token-value"
	for name, req := range map[string]port.CloneRequest{
		"userinfo":       {RunID: "r1", URL: "https://x:" + secret + "@git.example/a/b.git", WorkspaceDir: empty},
		"ssh":            {RunID: "r1", URL: "ssh://git@git.example/a/b.git", WorkspaceDir: empty},
		"ext":            {RunID: "r1", URL: "ext::sh -c touch% /tmp/x", WorkspaceDir: empty},
		"query":          {RunID: "r1", URL: "https://git.example/a/b.git?x=1", WorkspaceDir: empty},
		"not empty":      {RunID: "r1", URL: "https://git.example/a/b.git", WorkspaceDir: full},
		"symlink":        {RunID: "r1", URL: "https://git.example/a/b.git", WorkspaceDir: link},
		"relative":       {RunID: "r1", URL: "https://git.example/a/b.git", WorkspaceDir: "ws"},
		"bad run":        {RunID: "../r1", URL: "https://git.example/a/b.git", WorkspaceDir: empty},
		"branch option":  {RunID: "r1", URL: "https://git.example/a/b.git", Branch: "--upload-pack=touch", WorkspaceDir: empty},
		"branch escapes": {RunID: "r1", URL: "https://git.example/a/b.git", Branch: "../../x", WorkspaceDir: empty},
	} {
		_, err := r.Clone(ctx, req)
		if !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error echoes the credential: %v", name, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(r.cfg.cacheDir, "mirrors")); len(ents) != 0 {
		t.Errorf("a refused clone made mirrors: %v", ents)
	}
}

func TestCheckPushBranch(t *testing.T) {
	co := port.Checkout{Branch: "dev", DefaultBranch: "main"}
	pol := port.RepoPolicy{}.WithDefaults()
	for _, b := range []string{"agent/r1", "agent/team/r1"} {
		if err := checkPushBranch(b, co, pol, false); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	for _, b := range []string{"main", "dev", "agent/", "agent", "agent/../main", "agent/x.lock", "agent/-x", "agent//x", "agent/x y", "refs/heads/agent/x"} {
		if err := checkPushBranch(b, co, pol, false); err == nil {
			t.Errorf("%s accepted", b)
		}
	}
	if err := checkPushBranch("agent/r1", co, pol, true); err == nil {
		t.Error("a forced push accepted without AllowForce")
	}
	pol.AllowForce = true
	if err := checkPushBranch("agent/r1", co, pol, true); err != nil {
		t.Errorf("forced push with AllowForce: %v", err)
	}
	wide := port.RepoPolicy{BranchPrefix: "ma"}.WithDefaults()
	if err := checkPolicy(wide); err == nil {
		t.Error("a prefix without a trailing / accepted")
	}
}

func TestPrune(t *testing.T) {
	cache := t.TempDir()
	r, err := NewRelay(stubRunner{}, WithCacheDir(cache))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	mk := func(kind, name string, mtime time.Time) {
		p := filepath.Join(cache, kind, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("x"), 0o600)
		os.Chtimes(p, mtime, mtime)
	}
	mk("artefacts", "r1-1.bundle", old)
	mk("artefacts", "r2-1.bundle", time.Now())
	mk("quarantine", "r1-2", old)
	mk("export", "r1-3", old)
	mk("mirrors", "abc.git", old)
	rep, err := r.Prune(context.Background(), time.Hour, true)
	if err != nil || len(rep.Removed) != 3 {
		t.Fatalf("dry run %+v %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(cache, "artefacts", "r1-1.bundle")); err != nil {
		t.Fatal("a dry run removed something")
	}
	rep, err = r.Prune(context.Background(), time.Hour, false)
	if err != nil || strings.Join(rep.Removed, ",") != "export:r1-3,quarantine:r1-2,artefacts:r1-1.bundle" {
		t.Fatalf("prune %+v %v", rep, err)
	}
	for _, keep := range []string{"artefacts/r2-1.bundle", "mirrors/abc.git"} {
		if _, err := os.Stat(filepath.Join(cache, keep)); err != nil {
			t.Errorf("%s removed", keep)
		}
	}
}

// An exporter the sandbox user cannot run (in a 0700 directory from os.MkdirTemp, or
// without the execute bit) is refused by Clone, before the agent runs, with the fix
// in the error; a usable one passes the check.
func TestCloneChecksExporter(t *testing.T) {
	ctx := context.Background()
	mk := func(dirMode, binMode os.FileMode) string {
		dir, err := os.MkdirTemp(t.TempDir(), "exporter-")
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "sandbox-git-export")
		if err := os.WriteFile(bin, []byte("#!"), binMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(bin, binMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	for name, c := range map[string]struct {
		dir, bin os.FileMode
		bad      bool
	}{
		"MkdirTemp dir": {0o700, 0o755, true},
		"no exec bit":   {0o755, 0o644, true},
		"usable":        {0o755, 0o755, false},
	} {
		r, err := NewRelay(stubRunner{}, WithCacheDir(t.TempDir()), WithExporter(mk(c.dir, c.bin)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Clone(ctx, port.CloneRequest{RunID: "r1", URL: "http://127.0.0.1:1/a/b.git", WorkspaceDir: t.TempDir()})
		refused := errors.Is(err, port.ErrInvalidSpec) && strings.Contains(err.Error(), "exporter")
		if refused != c.bad {
			t.Errorf("%s: %v", name, err)
		}
		if c.bad && !strings.Contains(err.Error(), "chmod") {
			t.Errorf("%s: the error gives no fix: %v", name, err)
		}
	}
}
