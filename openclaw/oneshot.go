package openclaw

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// One-shot layout: everything OpenClaw needs lives in one directory under the
// workspace, so a run needs no other writable path than the workspace mount.
const (
	// OneShotDir is the directory under the workspace holding the config, the
	// prompt, OpenClaw's state and its HOME.
	OneShotDir = ".openclaw"
	// ConfigFileName is the config file inside OneShotDir.
	ConfigFileName = "openclaw.json"
	// PromptFileName is the prompt file inside OneShotDir, passed with --message-file.
	PromptFileName = "prompt.txt"
	// StateDirName is OpenClaw's state directory inside OneShotDir.
	StateDirName = "state"
	// HomeDirName is the HOME given to OpenClaw inside OneShotDir.
	HomeDirName = "home"
	// MaxPromptBytes is the largest prompt file OpenClaw reads (--message-file
	// rejects larger files).
	MaxPromptBytes = 4 << 20
)

// OneShot describes one `openclaw agent --local --json` run: a fresh session in a
// sandbox, with the prompt read from a workspace file. The zero values of the
// optional fields take the defaults.
type OneShot struct {
	// SessionID names the OpenClaw session; use the run ID. It is checked with
	// port.ValidateRunID.
	SessionID string
	// AgentID is the agent to run (default DefaultAgentID); it must be the config's.
	AgentID string
	// Timeout is the agent's --timeout (default DefaultAgentTimeout), rounded up to
	// whole seconds. Keep it below the sandbox's limit so the CLI exits cleanly.
	Timeout time.Duration
	// Model optionally overrides the config's model, as "<provider>/<model id>"
	// (see Config.ModelRef).
	Model string
	// Command starts the OpenClaw CLI in the sandbox image (default {"openclaw"}),
	// e.g. {"node", "/app/openclaw.mjs"}.
	Command []string
	// Workspace is the workspace as the sandbox sees it (default port.WorkspacePath).
	Workspace string
	// CompileCache, if set and built, is mounted read-only by Apply, so the run does
	// not compile OpenClaw's modules again (see CompileCache). A pool's runs carry
	// it in the template's mounts (or, pre-booted, in Preload.Mounts).
	CompileCache *CompileCache
}

func (o OneShot) withDefaults() OneShot {
	if o.AgentID == "" {
		o.AgentID = DefaultAgentID
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultAgentTimeout
	}
	if len(o.Command) == 0 {
		o.Command = []string{"openclaw"}
	}
	if o.Workspace == "" {
		o.Workspace = port.WorkspacePath
	}
	return o
}

func (o OneShot) validate() error {
	if err := port.ValidateRunID(o.SessionID); err != nil {
		return fmt.Errorf("openclaw one-shot session id: %w", err)
	}
	if !agentIDRE.MatchString(o.AgentID) {
		return port.Invalidf("openclaw one-shot agent id %q must match %s", o.AgentID, agentIDRE)
	}
	if o.Timeout < time.Second || o.Timeout > 48*time.Hour {
		return port.Invalidf("openclaw one-shot timeout %v is not in [1s, 48h]", o.Timeout)
	}
	if o.Model != "" && (!strings.Contains(o.Model, "/") || strings.HasPrefix(o.Model, "-") || strings.ContainsAny(o.Model, " \t\r\n\x00")) {
		return port.Invalidf("openclaw one-shot model %q is not \"<provider>/<model id>\"", o.Model)
	}
	for i, a := range o.Command {
		if a == "" || strings.ContainsRune(a, 0) {
			return port.Invalidf("openclaw one-shot command[%d] is empty or has a NUL byte", i)
		}
	}
	if !path.IsAbs(o.Workspace) {
		return port.Invalidf("openclaw one-shot workspace %q is not absolute", o.Workspace)
	}
	return nil
}

// dir is OneShotDir as the sandbox sees it.
func (o OneShot) dir() string { return path.Join(path.Clean(o.Workspace), OneShotDir) }

// ConfigPath is the config file as the sandbox sees it.
func (o OneShot) ConfigPath() string {
	return path.Join(o.withDefaults().dir(), ConfigFileName)
}

// PromptPath is the prompt file as the sandbox sees it.
func (o OneShot) PromptPath() string {
	return path.Join(o.withDefaults().dir(), PromptFileName)
}

// Argv returns the command line. The prompt is not in it: --message-file names
// the prompt file, so the prompt is never part of an argv or a shell string.
func (o OneShot) Argv() ([]string, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	secs := int64((o.Timeout + time.Second - 1) / time.Second)
	argv := slices.Clone(o.Command)
	argv = append(argv,
		"agent", "--local",
		"--agent", o.AgentID,
		"--session-id", o.SessionID,
		"--message-file", o.PromptPath(),
		"--json",
		"--timeout", strconv.FormatInt(secs, 10),
	)
	if o.Model != "" {
		argv = append(argv, "--model", o.Model)
	}
	return argv, nil
}

// Env returns the environment the CLI needs to start offline from the one-shot
// layout: config, state and HOME under the workspace; the config treated as
// read-only; no login-shell import, mDNS, update check or channels; no colour
// codes in captured stderr.
func (o OneShot) Env() map[string]string {
	d := o.withDefaults().dir()
	return map[string]string{
		"HOME":                     path.Join(d, HomeDirName),
		"OPENCLAW_CONFIG_PATH":     path.Join(d, ConfigFileName),
		"OPENCLAW_STATE_DIR":       path.Join(d, StateDirName),
		"OPENCLAW_CONFIG_READONLY": "1",
		"OPENCLAW_LOAD_SHELL_ENV":  "0",
		"OPENCLAW_DISABLE_BONJOUR": "1",
		"OPENCLAW_NO_AUTO_UPDATE":  "1",
		"OPENCLAW_SKIP_CHANNELS":   "1",
		"NO_COLOR":                 "1",
	}
}

// Apply sets spec's Argv and adds Env (the one-shot's variables replace the
// spec's of the same name), and the compile cache's mount when it is built (unless
// spec mounts something there already). It refuses a spec whose time limit does
// not leave the agent's timeout room to end cleanly. Errors wrap
// port.ErrInvalidSpec.
func (o OneShot) Apply(spec *port.RunSpec) error {
	argv, err := o.Argv()
	if err != nil {
		return err
	}
	o = o.withDefaults()
	if limit := spec.WithDefaults().Limits.Timeout; limit <= o.Timeout {
		return port.Invalidf("openclaw one-shot timeout %v must be below the sandbox time limit %v", o.Timeout, limit)
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	maps.Copy(spec.Env, o.Env())
	spec.Argv = argv
	if o.CompileCache != nil {
		if m, ok := o.CompileCache.Mount(); ok && !slices.ContainsFunc(spec.Mounts, func(x port.Mount) bool { return x.Target == m.Target }) {
			spec.Mounts = append(spec.Mounts, m)
		}
	}
	return nil
}

// Prepare writes a run's inputs into hostDir, the host directory mounted as the
// workspace: the config, the workspace files and the prompt, and the state and
// home directories OpenClaw writes to.
//
// The config must be a sandbox-mode config (a gateway never runs in a one-shot
// sandbox) whose workspace and agent are the one-shot's. The prompt must be
// non-blank UTF-8 without NUL bytes, at most MaxPromptBytes. Errors wrap
// port.ErrInvalidSpec for bad input (hostDir not an existing directory included);
// nothing is written then. Other errors are the file system's.
//
// hostDir may be a workspace an agent has used. Prepare never follows, opens or
// chmods what the agent left: every write stays inside hostDir (through an os.Root),
// OneShotDir is recreated (what was there, a symlink to a host directory included,
// is moved aside and removed as far as the host may), and the workspace files are
// replaced atomically, as WriteWorkspace does. OpenClaw's state from earlier runs
// goes with OneShotDir: every one-shot starts a fresh session.
//
// The state and home directories get mode 0777: the sandbox user is usually not
// the host user that creates them. Config, prompt and workspace files are 0644 (the
// config 0600 when it holds a secret).
func (o OneShot) Prepare(hostDir string, cfg *Config, files Files, prompt string) error {
	return o.prepare(hostDir, cfg, files, prompt, makeDir)
}

// prepare checks the inputs (nothing is written on bad input), then writes the layout
// into hostDir: OneShotDir and its state and home directories through mkdir (makeDir
// recreates them, keepDir keeps what is there), the config, the workspace files and the
// prompt.
func (o OneShot) prepare(hostDir string, cfg *Config, files Files, prompt string, mkdir func(*os.Root, string, fs.FileMode) error) error {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return err
	}
	if cfg == nil {
		return port.Invalidf("openclaw one-shot: config is nil")
	}
	if cfg.Gateway() {
		return port.Invalidf("openclaw one-shot: the config is for gateway mode; a gateway never runs in a one-shot sandbox")
	}
	if ws, _ := cfg.Lookup("agents.defaults.workspace"); ws != path.Clean(o.Workspace) {
		return port.Invalidf("openclaw one-shot: config workspace %v is not the one-shot's %q", ws, o.Workspace)
	}
	if _, ok := cfg.Lookup("agents.entries." + o.AgentID); !ok {
		return port.Invalidf("openclaw one-shot: agent %q is not in the config", o.AgentID)
	}
	if err := checkPrompt(prompt); err != nil {
		return err
	}
	rendered, err := files.render() // before anything is written
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return port.Invalidf("openclaw one-shot: workspace %q is not an existing directory", hostDir)
	}
	defer root.Close()

	if err := mkdir(root, OneShotDir, 0o755); err != nil {
		return err
	}
	d, err := root.OpenRoot(OneShotDir)
	if err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	defer d.Close()
	for _, sub := range []string{StateDirName, HomeDirName} {
		if err := mkdir(d, sub, 0o777); err != nil {
			return err
		}
	}
	if err := writeFileIn(d, ConfigFileName, cfg.JSON(), cfg.FileMode()); err != nil {
		return err
	}
	if err := writeWorkspace(root, rendered); err != nil {
		return err
	}
	return writeFileIn(d, PromptFileName, []byte(prompt), 0o644)
}

func checkPrompt(p string) error {
	if strings.TrimSpace(p) == "" {
		return port.Invalidf("openclaw prompt is blank")
	}
	if len(p) > MaxPromptBytes {
		return port.Invalidf("openclaw prompt is %d bytes, over the limit of %d", len(p), MaxPromptBytes)
	}
	return checkText("prompt", p, MaxPromptBytes)
}
