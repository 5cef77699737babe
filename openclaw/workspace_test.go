package openclaw_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

func TestWriteWorkspace(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, openclaw.WriteWorkspace(dir, openclaw.Files{
		Agents: "# Rules\n\nBe careful.\n\n",
		Soul:   "Calm.",
		Tools:  "git is available.\n",
	}))
	agents, err := os.ReadFile(filepath.Join(dir, "AGENTS.md"))
	require.NoError(t, err)
	assert.Equal(t, "# Rules\n\nBe careful.\n\n## Tools\n\ngit is available.\n", string(agents))
	soul, err := os.ReadFile(filepath.Join(dir, "SOUL.md"))
	require.NoError(t, err)
	assert.Equal(t, "Calm.", string(soul))
	for _, name := range []string{"AGENTS.md", "SOUL.md"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	}
	assert.NoFileExists(t, filepath.Join(dir, "TOOLS.md"), "OpenClaw no longer reads TOOLS.md")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2)
}

func TestWriteWorkspaceToolsOnlyAndEmpty(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, openclaw.WriteWorkspace(dir, openclaw.Files{Tools: "curl works"}))
	agents, err := os.ReadFile(filepath.Join(dir, "AGENTS.md"))
	require.NoError(t, err)
	assert.Equal(t, "## Tools\n\ncurl works\n", string(agents))
	assert.NoFileExists(t, filepath.Join(dir, "SOUL.md"), "empty texts write no file")

	empty := t.TempDir()
	require.NoError(t, openclaw.WriteWorkspace(empty, openclaw.Files{}))
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestWriteWorkspaceRefuses(t *testing.T) {
	limit := openclaw.MaxWorkspaceFileChars
	for name, f := range map[string]openclaw.Files{
		"oversize agents":          {Agents: strings.Repeat("a", limit+1)},
		"oversize soul":            {Soul: strings.Repeat("a", limit+1)},
		"tools push agents over":   {Agents: strings.Repeat("a", limit-5), Tools: "more tools"},
		"astral chars count twice": {Soul: strings.Repeat("😀", limit/2+1)}, // UTF-16 surrogate pairs
		"invalid utf8":             {Soul: "\xff"},
		"nul byte":                 {Agents: "a\x00"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			err := openclaw.WriteWorkspace(dir, f)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
			entries, rerr := os.ReadDir(dir)
			require.NoError(t, rerr)
			assert.Empty(t, entries, "nothing written")
		})
	}
	require.NoError(t, openclaw.WriteWorkspace(t.TempDir(), openclaw.Files{Soul: strings.Repeat("😀", limit/2)}), "exactly the limit is fine")

	err := openclaw.WriteWorkspace(filepath.Join(t.TempDir(), "missing"), openclaw.Files{Soul: "x"})
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
}

func TestWriteWorkspaceReplacesSymlinks(t *testing.T) {
	// A previous agent could leave AGENTS.md as a symlink to a host file; writing
	// must replace the link, not write through it.
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "host-file")
	require.NoError(t, os.WriteFile(target, []byte("precious"), 0o644))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "AGENTS.md")))

	require.NoError(t, openclaw.WriteWorkspace(dir, openclaw.Files{Agents: "new"}))
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(b))
	fi, err := os.Lstat(filepath.Join(dir, "AGENTS.md"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
}
