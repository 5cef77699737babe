package openclaw_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

func TestOneShotPrepareNextKeepsTheConversation(t *testing.T) {
	ws := t.TempDir()
	cfg := sandboxConfig(t)
	o := openclaw.OneShot{SessionID: "conv-1"}
	require.NoError(t, o.Prepare(ws, cfg, openclaw.Files{Agents: "first"}, "turn one"))
	// What the first turn left in OpenClaw's state.
	transcript := filepath.Join(ws, ".openclaw/state/agents/main/transcript.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Dir(transcript), 0o700))
	require.NoError(t, os.WriteFile(transcript, []byte("turn one's content"), 0o600))
	// An agent's edit of its config is not what the next turn runs with.
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".openclaw/openclaw.json"), []byte("{}"), 0o644))

	require.NoError(t, o.PrepareNext(ws, cfg, openclaw.Files{Agents: "second"}, "turn two"))
	b, err := os.ReadFile(transcript)
	require.NoError(t, err)
	assert.Equal(t, "turn one's content", string(b), "the state is kept")
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(ws, rel))
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, "turn two", read(".openclaw/prompt.txt"))
	assert.Equal(t, string(cfg.JSON()), read(".openclaw/openclaw.json"))
	assert.Equal(t, "second", read("AGENTS.md"))

	// Prepare, by contrast, starts afresh.
	require.NoError(t, o.Prepare(ws, cfg, openclaw.Files{}, "new conversation"))
	_, err = os.Stat(transcript)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestOneShotPrepareNextOnAFreshOrHostileWorkspace(t *testing.T) {
	cfg := sandboxConfig(t)
	o := openclaw.OneShot{SessionID: "conv-1"}
	fresh := t.TempDir()
	require.NoError(t, o.PrepareNext(fresh, cfg, openclaw.Files{}, "first turn"), "a missing layout is made")
	fi, err := os.Stat(filepath.Join(fresh, ".openclaw/state"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())

	outside := t.TempDir()
	for name, plant := range map[string]func(ws string) error{
		"one-shot dir is a link": func(ws string) error { return os.Symlink(outside, filepath.Join(ws, ".openclaw")) },
		"state is a link": func(ws string) error {
			if err := os.Mkdir(filepath.Join(ws, ".openclaw"), 0o755); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(ws, ".openclaw/state"))
		},
		"state is a file": func(ws string) error {
			if err := os.Mkdir(filepath.Join(ws, ".openclaw"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(ws, ".openclaw/state"), nil, 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			require.NoError(t, plant(ws))
			err := o.PrepareNext(ws, cfg, openclaw.Files{}, "next")
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
			ents, _ := os.ReadDir(outside)
			assert.Empty(t, ents, "nothing written through the link")
		})
	}
}
