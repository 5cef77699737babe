package openclaw_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

func TestOneShotArgv(t *testing.T) {
	argv, err := openclaw.OneShot{SessionID: "run-42"}.Argv()
	require.NoError(t, err)
	assert.Equal(t, []string{
		"openclaw", "agent", "--local", "--agent", "main", "--session-id", "run-42",
		"--message-file", "/workspace/.openclaw/prompt.txt", "--json", "--timeout", "540",
	}, argv)

	argv, err = openclaw.OneShot{
		SessionID: "r1", AgentID: "coder", Timeout: 90*time.Second + time.Millisecond,
		Model: "litellm/gpt-5", Command: []string{"node", "/app/openclaw.mjs"}, Workspace: "/w/",
	}.Argv()
	require.NoError(t, err)
	assert.Equal(t, []string{
		"node", "/app/openclaw.mjs", "agent", "--local", "--agent", "coder", "--session-id", "r1",
		"--message-file", "/w/.openclaw/prompt.txt", "--json", "--timeout", "91", "--model", "litellm/gpt-5",
	}, argv)
}

func TestOneShotArgvRefusesBadInput(t *testing.T) {
	for name, o := range map[string]openclaw.OneShot{
		"no session":          {},
		"session with space":  {SessionID: "a b"},
		"session flag":        {SessionID: "-rf"},
		"agent id":            {SessionID: "r", AgentID: "Main"},
		"tiny timeout":        {SessionID: "r", Timeout: time.Millisecond},
		"negative timeout":    {SessionID: "r", Timeout: -time.Second},
		"model without slash": {SessionID: "r", Model: "gpt-5"},
		"model flag":          {SessionID: "r", Model: "--help/x"},
		"empty command arg":   {SessionID: "r", Command: []string{"node", ""}},
		"relative workspace":  {SessionID: "r", Workspace: "workspace"},
	} {
		t.Run(name, func(t *testing.T) {
			argv, err := o.Argv()
			assert.Nil(t, argv)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
		})
	}
}

func TestOneShotEnv(t *testing.T) {
	o := openclaw.OneShot{SessionID: "r"}
	assert.Equal(t, map[string]string{
		"HOME":                     "/workspace/.openclaw/home",
		"OPENCLAW_CONFIG_PATH":     "/workspace/.openclaw/openclaw.json",
		"OPENCLAW_STATE_DIR":       "/workspace/.openclaw/state",
		"OPENCLAW_CONFIG_READONLY": "1",
		"OPENCLAW_LOAD_SHELL_ENV":  "0",
		"OPENCLAW_DISABLE_BONJOUR": "1",
		"OPENCLAW_NO_AUTO_UPDATE":  "1",
		"OPENCLAW_SKIP_CHANNELS":   "1",
		"NO_COLOR":                 "1",
	}, o.Env())
	assert.Equal(t, o.Env()["OPENCLAW_CONFIG_PATH"], o.ConfigPath())
	assert.Equal(t, "/workspace/.openclaw/prompt.txt", o.PromptPath())
}

func TestOneShotApply(t *testing.T) {
	spec := port.RunSpec{RunID: "r1", Image: "agent", Env: map[string]string{"HOME": "/elsewhere", "KEEP": "1"}}
	o := openclaw.OneShot{SessionID: "r1"}
	require.NoError(t, o.Apply(&spec))
	argv, _ := o.Argv()
	assert.Equal(t, argv, spec.Argv)
	assert.Equal(t, "1", spec.Env["KEEP"])
	assert.Equal(t, "/workspace/.openclaw/home", spec.Env["HOME"], "the one-shot's variables win")
	require.NoError(t, spec.WithDefaults().Validate(), "the result is a valid run spec")

	tight := port.RunSpec{RunID: "r1", Image: "agent", Limits: port.Limits{Timeout: 5 * time.Minute}}
	err := openclaw.OneShot{SessionID: "r1", Timeout: 5 * time.Minute}.Apply(&tight)
	assert.ErrorIs(t, err, port.ErrInvalidSpec, "the agent needs time to end before the sandbox is killed")
	assert.Nil(t, tight.Argv, "nothing applied on error")
	assert.Nil(t, tight.Env)

	var nilEnv port.RunSpec
	require.NoError(t, openclaw.OneShot{SessionID: "r1", Timeout: time.Minute}.Apply(&nilEnv))
	assert.Equal(t, "1", nilEnv.Env["OPENCLAW_CONFIG_READONLY"])
}

func sandboxConfig(t *testing.T, opts ...openclaw.Option) *openclaw.Config {
	t.Helper()
	cfg, err := openclaw.NewConfig(append([]openclaw.Option{openclaw.WithModels(testModels(t)...)}, opts...)...)
	require.NoError(t, err)
	return cfg
}

func TestOneShotPrepare(t *testing.T) {
	ws := t.TempDir()
	cfg := sandboxConfig(t)
	prompt := "Fix the bug.\n$(rm -rf ~) \"quoted\"\n"
	o := openclaw.OneShot{SessionID: "r1"}
	require.NoError(t, o.Prepare(ws, cfg, openclaw.Files{Agents: "Agents text", Soul: "Soul text"}, prompt))

	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(ws, rel))
		require.NoError(t, err)
		return string(b)
	}
	mode := func(rel string) os.FileMode {
		fi, err := os.Stat(filepath.Join(ws, rel))
		require.NoError(t, err)
		return fi.Mode()
	}
	assert.Equal(t, prompt, read(".openclaw/prompt.txt"))
	assert.Equal(t, string(cfg.JSON()), read(".openclaw/openclaw.json"))
	assert.Equal(t, "Agents text", read("AGENTS.md"))
	assert.Equal(t, "Soul text", read("SOUL.md"))
	assert.Equal(t, os.FileMode(0o644), mode(".openclaw/prompt.txt").Perm())
	assert.Equal(t, os.FileMode(0o644), mode(".openclaw/openclaw.json").Perm())
	assert.Equal(t, os.FileMode(0o755), mode(".openclaw").Perm())
	assert.True(t, mode(".openclaw/state").IsDir())
	assert.Equal(t, os.FileMode(0o777), mode(".openclaw/state").Perm(), "the sandbox user must write state")
	assert.Equal(t, os.FileMode(0o777), mode(".openclaw/home").Perm())

	argv, err := o.Argv()
	require.NoError(t, err)
	for _, a := range argv {
		assert.NotContains(t, a, "Fix the bug", "the prompt is never in argv")
	}
}

func TestOneShotPrepareRefuses(t *testing.T) {
	cfg := sandboxConfig(t)
	o := openclaw.OneShot{SessionID: "r1"}
	cases := map[string]struct {
		o      openclaw.OneShot
		cfg    *openclaw.Config
		prompt string
		files  openclaw.Files
	}{
		"nil config":         {o, nil, "hi", openclaw.Files{}},
		"gateway config":     {o, sandboxConfig(t, openclaw.WithGateway(openclaw.Gateway{Port: 1, Token: "tok-0123456789abcdef"})), "hi", openclaw.Files{}},
		"workspace mismatch": {o, sandboxConfig(t, openclaw.WithWorkspace("/srv/ws")), "hi", openclaw.Files{}},
		"agent not in cfg":   {openclaw.OneShot{SessionID: "r1", AgentID: "coder"}, cfg, "hi", openclaw.Files{}},
		"blank prompt":       {o, cfg, " \n\t", openclaw.Files{}},
		"nul in prompt":      {o, cfg, "a\x00b", openclaw.Files{}},
		"bad utf8 prompt":    {o, cfg, "a\xffb", openclaw.Files{}},
		"oversize prompt":    {o, cfg, strings.Repeat("a", openclaw.MaxPromptBytes+1), openclaw.Files{}},
		"oversize agents":    {o, cfg, "hi", openclaw.Files{Agents: strings.Repeat("a", openclaw.MaxWorkspaceFileChars+1)}},
		"bad session":        {openclaw.OneShot{}, cfg, "hi", openclaw.Files{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			err := tc.o.Prepare(ws, tc.cfg, tc.files, tc.prompt)
			assert.ErrorIs(t, err, port.ErrInvalidSpec)
			entries, rerr := os.ReadDir(ws)
			require.NoError(t, rerr)
			assert.Empty(t, entries, "nothing written when the input is refused")
		})
	}
	err := o.Prepare(filepath.Join(t.TempDir(), "missing"), cfg, openclaw.Files{}, "hi")
	assert.ErrorIs(t, err, port.ErrInvalidSpec)

	// A prompt of exactly the limit is fine.
	require.NoError(t, o.Prepare(t.TempDir(), cfg, openclaw.Files{}, strings.Repeat("a", openclaw.MaxPromptBytes)))
}
