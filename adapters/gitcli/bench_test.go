package gitcli_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/gitcli"
	"github.com/agentsandbox/sandbox/internal/testsupport/gittest"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv/testsweep"
	"github.com/agentsandbox/sandbox/port"
)

type noRunner struct{}

func (noRunner) RunOnce(context.Context, port.RunSpec) (*port.RunResult, error) {
	return nil, errors.New("clone runs no sandbox")
}

var bigRepo struct {
	once sync.Once
	srv  *gittest.Server
	root string
	err  error
}

func TestMain(m *testing.M) {
	code := testsweep.Main(m) // a dead earlier run's relay sandboxes are swept first
	if bigRepo.srv != nil {
		bigRepo.srv.Close()
	}
	if bigRepo.root != "" {
		os.RemoveAll(bigRepo.root)
	}
	os.Exit(code)
}

// bigServer serves "big": 10,000 files of about 100 bytes in 100 directories.
func bigServer(b *testing.B) *gittest.Server {
	testenv.NeedCommand(b, "git", "git")
	bigRepo.once.Do(func() {
		root, err := os.MkdirTemp("", "gitrelay-bench-")
		if err != nil {
			bigRepo.err = err
			return
		}
		bigRepo.root = root
		srv, err := gittest.NewServer(root, canaryToken)
		if err != nil {
			bigRepo.err = err
			return
		}
		files := map[string]string{}
		for i := range 10000 {
			files[fmt.Sprintf("d%02d/f%04d.txt", i%100, i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), 10)
		}
		_, bigRepo.err = srv.CreateRepo("big", files)
		bigRepo.srv = srv
	})
	if bigRepo.err != nil {
		b.Fatal(bigRepo.err)
	}
	return bigRepo.srv
}

// BenchmarkClone: a 10k-file repository into a fresh workspace, through the relay from
// a warm mirror (fetch, base recorded, --no-local clone, remote URL reset, chown)
// against a plain `git clone` of the same remote.
func BenchmarkClone(b *testing.B) {
	srv := bigServer(b)
	url := srv.RepoURL("big")
	b.Run("relay-warm-mirror", func(b *testing.B) {
		r, err := gitcli.NewRelay(noRunner{}, gitcli.WithCacheDir(b.TempDir()), gitcli.WithCredentials(func(context.Context, string) (gitcli.Credential, error) {
			return gitcli.Credential{Username: "x", Password: canaryToken}, nil
		}))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := r.Clone(ctx, port.CloneRequest{RunID: "warm", URL: url, WorkspaceDir: workspace(b)}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ws := workspace(b)
			b.StartTimer()
			if _, err := r.Clone(ctx, port.CloneRequest{RunID: "bench", URL: url, WorkspaceDir: ws}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(ws)
			b.StartTimer()
		}
	})
	b.Run("plain-git-clone", func(b *testing.B) {
		authed := strings.Replace(url, "http://", "http://x:"+canaryToken+"@", 1)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			ws := filepath.Join(b.TempDir(), "ws")
			b.StartTimer()
			cmd := exec.Command("git", "clone", "-q", authed, ws)
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			b.StopTimer()
			os.RemoveAll(ws)
			b.StartTimer()
		}
	})
}

// BenchmarkExportPush: 10 commits of an agent exported in a sandbox, ingested,
// validated and pushed (the clone and the commits are not timed).
func BenchmarkExportPush(b *testing.B) {
	for _, rt := range runtimes(b) {
		b.Run(rt.name, func(b *testing.B) {
			f := newFixture(b, rt, canaryToken)
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ws := workspace(b)
				runID := fmt.Sprintf("bench-%d", i)
				co, err := f.relay.Clone(ctx, port.CloneRequest{RunID: runID, URL: f.url, WorkspaceDir: ws})
				if err != nil {
					b.Fatal(err)
				}
				commitFiles(b, ws, map[string]string{"a.txt": runID, "b/c.txt": "x"}, 10)
				b.StartTimer()
				exp, err := f.relay.Export(ctx, port.ExportRequest{RunID: runID, Checkout: *co, WorkspaceDir: ws, Image: rt.image})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.relay.Push(ctx, port.PushRequest{Export: *exp}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.Remove(exp.Bundle)
				b.StartTimer()
			}
		})
	}
}
