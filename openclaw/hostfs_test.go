package openclaw_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
)

// hostSide is what lives outside the workspace: a file and a directory an agent
// must not be able to make the host write to, chmod or read.
type hostSide struct {
	file, dir string
}

const hostText = "host secret\n"

func newHostSide(t *testing.T) hostSide {
	t.Helper()
	base := t.TempDir()
	h := hostSide{file: filepath.Join(base, "secret.txt"), dir: filepath.Join(base, "private")}
	require.NoError(t, os.WriteFile(h.file, []byte(hostText), 0o600))
	require.NoError(t, os.Chmod(h.file, 0o600))
	require.NoError(t, os.Mkdir(h.dir, 0o700))
	require.NoError(t, os.Chmod(h.dir, 0o700))
	return h
}

// untouched asserts the host side is as newHostSide left it.
func (h hostSide) untouched(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(h.file)
	require.NoError(t, err)
	assert.Equal(t, hostText, string(b), "the host file's content is untouched")
	fi, err := os.Stat(h.file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the host file's mode is untouched")
	di, err := os.Stat(h.dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm(), "the host directory's mode is untouched")
	entries, err := os.ReadDir(h.dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing is written into the host directory")
}

const (
	wsPrompt = "Do the task.\n"
	wsAgents = "Agents text"
	wsSoul   = "Soul text"
)

// prepared asserts ws holds a fresh one-shot layout: real directories and regular
// files (not links) with the host's content and modes.
func prepared(t *testing.T, ws string, cfg *openclaw.Config) {
	t.Helper()
	dir := func(rel string, perm os.FileMode) {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		require.NoError(t, err)
		require.True(t, fi.IsDir(), "%s is a real directory, not %v", rel, fi.Mode().Type())
		assert.Equal(t, perm, fi.Mode().Perm(), rel)
	}
	file := func(rel, want string) {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular(), "%s is a regular file, not %v", rel, fi.Mode().Type())
		assert.Equal(t, uint64(1), fi.Sys().(*syscall.Stat_t).Nlink, "%s is not linked anywhere else", rel)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), rel)
		b, err := os.ReadFile(filepath.Join(ws, rel))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), rel)
	}
	dir(".openclaw", 0o755)
	dir(".openclaw/state", 0o777)
	dir(".openclaw/home", 0o777)
	file(".openclaw/openclaw.json", string(cfg.JSON()))
	file(".openclaw/prompt.txt", wsPrompt)
	file("AGENTS.md", wsAgents)
	file("SOUL.md", wsSoul)
	entries, err := os.ReadDir(filepath.Join(ws, ".openclaw/state"))
	require.NoError(t, err)
	assert.Empty(t, entries, "the state directory is fresh")
}

// prepareWithin runs Prepare and fails the test if it does not return within a few
// seconds: opening a FIFO the agent planted would block forever.
func prepareWithin(t *testing.T, ws string, cfg *openclaw.Config) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- openclaw.OneShot{SessionID: "r2"}.Prepare(ws, cfg, openclaw.Files{Agents: wsAgents, Soul: wsSoul}, wsPrompt)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Prepare blocked on what the agent left in the workspace")
		return nil
	}
}

// TestOneShotPrepareReusedWorkspace runs Prepare on a workspace a previous run's
// agent has rigged: each attack leaves the host side untouched and the workspace in
// the fresh one-shot layout.
func TestOneShotPrepareReusedWorkspace(t *testing.T) {
	mkfifo := func(p string) error { return syscall.Mkfifo(p, 0o666) }
	huge := func(p string) error {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(8 << 30) // sparse: 8 GiB a reader would try to swallow
	}
	attacks := map[string]func(t *testing.T, ws string, h hostSide){
		"symlinked state dir": func(t *testing.T, ws string, h hostSide) {
			replace(t, filepath.Join(ws, ".openclaw/state"), func(p string) error { return os.Symlink(h.dir, p) })
		},
		"symlinked home dir": func(t *testing.T, ws string, h hostSide) {
			replace(t, filepath.Join(ws, ".openclaw/home"), func(p string) error { return os.Symlink(h.dir, p) })
		},
		"symlinked one-shot dir": func(t *testing.T, ws string, h hostSide) {
			replace(t, filepath.Join(ws, ".openclaw"), func(p string) error { return os.Symlink(h.dir, p) })
		},
		"symlinked files": func(t *testing.T, ws string, h hostSide) {
			for _, rel := range []string{".openclaw/prompt.txt", ".openclaw/openclaw.json", "AGENTS.md", "SOUL.md"} {
				replace(t, filepath.Join(ws, rel), func(p string) error { return os.Symlink(h.file, p) })
			}
		},
		"hard links to a host file": func(t *testing.T, ws string, h hostSide) {
			for _, rel := range []string{".openclaw/prompt.txt", ".openclaw/openclaw.json", "AGENTS.md", "SOUL.md"} {
				replace(t, filepath.Join(ws, rel), func(p string) error { return os.Link(h.file, p) })
			}
		},
		"FIFOs": func(t *testing.T, ws string, h hostSide) {
			for _, rel := range []string{".openclaw/state", ".openclaw/prompt.txt", ".openclaw/openclaw.json", "AGENTS.md"} {
				replace(t, filepath.Join(ws, rel), mkfifo)
			}
		},
		"FIFO as the one-shot dir": func(t *testing.T, ws string, h hostSide) {
			replace(t, filepath.Join(ws, ".openclaw"), mkfifo)
		},
		"huge files": func(t *testing.T, ws string, h hostSide) {
			for _, rel := range []string{".openclaw/home", ".openclaw/openclaw.json", "AGENTS.md"} {
				replace(t, filepath.Join(ws, rel), huge)
			}
		},
		"directories where files belong": func(t *testing.T, ws string, h hostSide) {
			for _, rel := range []string{".openclaw/prompt.txt", "SOUL.md"} {
				replace(t, filepath.Join(ws, rel), func(p string) error {
					if err := os.Mkdir(p, 0o755); err != nil {
						return err
					}
					return os.Symlink(h.file, filepath.Join(p, "inner"))
				})
			}
		},
		"state full of links": func(t *testing.T, ws string, h hostSide) {
			st := filepath.Join(ws, ".openclaw/state")
			require.NoError(t, os.Symlink(h.dir, filepath.Join(st, "agents")))
			require.NoError(t, os.Symlink(h.file, filepath.Join(st, "openclaw.json")))
			require.NoError(t, os.Link(h.file, filepath.Join(st, "hard")))
			require.NoError(t, mkfifo(filepath.Join(st, "fifo")))
		},
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			cfg := sandboxConfig(t)
			h := newHostSide(t)
			require.NoError(t, openclaw.OneShot{SessionID: "r1"}.Prepare(ws, cfg, openclaw.Files{Agents: "old", Soul: "old"}, "old prompt"))
			attack(t, ws, h)

			require.NoError(t, prepareWithin(t, ws, cfg), "the agent's entries are replaced")
			h.untouched(t)
			prepared(t, ws, cfg)
		})
	}
}

// replace removes what is at p (as the agent may) and creates the agent's entry.
func replace(t *testing.T, p string, create func(p string) error) {
	t.Helper()
	require.NoError(t, os.RemoveAll(p))
	require.NoError(t, create(p))
}

// WriteWorkspace on its own gives the same guarantees for the workspace files.
func TestWriteWorkspaceReplacesWhatTheAgentLeft(t *testing.T) {
	ws := t.TempDir()
	h := newHostSide(t)
	require.NoError(t, os.Link(h.file, filepath.Join(ws, "AGENTS.md")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "SOUL.md"), 0o666))
	require.NoError(t, openclaw.WriteWorkspace(ws, openclaw.Files{Agents: wsAgents, Soul: wsSoul}))
	h.untouched(t)
	for rel, want := range map[string]string{"AGENTS.md": wsAgents, "SOUL.md": wsSoul} {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular(), rel)
		b, err := os.ReadFile(filepath.Join(ws, rel))
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}

	// A workspace that is itself a symlink is the caller's to give; a file is refused.
	_, err := os.Stat(filepath.Join(ws, "AGENTS.md"))
	require.NoError(t, err)
	assert.Error(t, openclaw.WriteWorkspace(filepath.Join(ws, "AGENTS.md"), openclaw.Files{Agents: "x"}))
}
