package gitcli_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/agentsandbox/sandbox/port"
)

// TestExportRefusesFIFOs: a FIFO where the exporter reads a file (packed-refs, a
// loose ref, an object) is refused at once, in a real sandbox on every runtime, with
// the layout rule and the path; before, the export blocked until its timeout.
func TestExportRefusesFIFOs(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			f := newFixture(t, rt, canaryToken)
			for name, place := range map[string]func(ws, tip string) string{
				"packed-refs": func(ws, _ string) string {
					os.Remove(filepath.Join(ws, ".git/packed-refs"))
					return "packed-refs"
				},
				"loose-ref": func(ws, _ string) string {
					os.Remove(filepath.Join(ws, ".git/refs/heads/main"))
					return "refs/heads/main"
				},
				"object": func(ws, tip string) string {
					p := "objects/" + tip[:2] + "/" + tip[2:]
					os.Remove(filepath.Join(ws, ".git", p))
					return p
				},
			} {
				t.Run(name, func(t *testing.T) {
					ws := workspace(t)
					runID := "fifo-" + name + "-" + rt.name
					co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
					if err != nil {
						t.Fatal(err)
					}
					tip := commitFiles(t, ws, map[string]string{"a.txt": name}, 1)[0]
					rel := place(ws, tip)
					if err := syscall.Mkfifo(filepath.Join(ws, ".git", rel), 0o644); err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					_, err = f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: rt.image})
					took := time.Since(start)
					var re *port.RejectError
					if !errors.As(err, &re) || re.Rule != port.RuleLayout || re.Path != ".git/"+rel {
						t.Fatalf("Export: %v (%+v), want layout at .git/%s", err, re, rel)
					}
					// The export sandbox's start and stop included; the exporter itself
					// refuses before reading anything.
					if took > 20*time.Second {
						t.Fatalf("the refusal took %v", took)
					}
					t.Logf("refused in %v (export sandbox included)", took)
				})
			}
		})
	}
}

// bigExport clones f's repository, commits size random (incompressible) bytes as
// big.bin and exports the commit in f's runtime.
func bigExport(ctx context.Context, t *testing.T, f *fixture, runID string, size int, pol port.RepoPolicy) *port.Export {
	t.Helper()
	ws := workspace(t)
	co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent's blob is written by git itself (go-git hashing 50 MiB under the race
	// detector takes minutes); the commit is go-git's, as elsewhere.
	cmd := exec.CommandContext(ctx, "git", "hash-object", "-w", "--no-filters", big)
	cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(ws, ".git"), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	base := plumbing.NewHash(co.Base)
	rawCommit(t, ws, co.Branch, []plumbing.Hash{base}, append(baseTree(t, ws, base),
		object.TreeEntry{Name: "big.bin", Mode: filemode.Regular, Hash: plumbing.NewHash(strings.TrimSpace(string(out)))}))
	exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: f.rt.image, Policy: pol})
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	return exp
}

// TestLargePush: a 50 MiB push (chunked by git over its 1 MiB post buffer) goes
// through the export sandbox and reaches the test server; a push over a server's body
// limit fails as a PushError carrying the HTTP status. About 30 s.
func TestLargePush(t *testing.T) {
	rt := runtimes(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pol := port.RepoPolicy{MaxFileBytes: 64 << 20, MaxTotalBytes: 128 << 20}
	t.Run("50MiB", func(t *testing.T) {
		f := newFixture(t, rt, canaryToken)
		exp := bigExport(ctx, t, f, "bigpush", 50<<20, pol)
		start := time.Now()
		res, err := f.relay.Push(ctx, port.PushRequest{Export: *exp, Policy: pol})
		if err != nil {
			t.Fatalf("Push: %v", err)
		}
		t.Logf("50 MiB pushed in %v", time.Since(start))
		if tip, _ := f.srv.Git(f.repo, "rev-parse", res.Branch); tip != exp.Tip {
			t.Fatalf("server branch %s at %q, want %s", res.Branch, tip, exp.Tip)
		}
		if size, _ := f.srv.Git(f.repo, "cat-file", "-s", exp.Tip+":big.bin"); size != "52428800" {
			t.Fatalf("big.bin on the server is %q bytes", size)
		}
	})
	t.Run("413", func(t *testing.T) {
		f := newFixture(t, rt, canaryToken)
		f.srv.SetMaxBody(1 << 20)
		exp := bigExport(ctx, t, f, "toobig", 2<<20, pol)
		_, err := f.relay.Push(ctx, port.PushRequest{Export: *exp, Policy: pol})
		var pe *port.PushError
		if !errors.As(err, &pe) || pe.Status != 413 || !errors.Is(err, port.ErrRejected) || pe.Bundle != exp.Bundle {
			t.Fatalf("push over the server's limit: %v (%+v)", err, pe)
		}
		if strings.Contains(err.Error(), canaryToken) {
			t.Fatal("the token is in the error")
		}
	})
}
