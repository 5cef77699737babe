package openclaw

import (
	"fmt"
	"os"
	"path"

	"github.com/agentsandbox/sandbox/port"
)

// PrepareNext writes the next turn of a conversation into hostDir, a workspace
// where earlier one-shots of the same SessionID left OpenClaw's state: the config,
// the workspace files and the prompt are replaced as Prepare writes them, and the
// state and home directories are kept (created when missing), so OpenClaw loads the
// session's earlier turns (its session store and transcript) and answers from them.
// Use the same SessionID for every turn; each turn's run still gets its own run ID.
//
// hostDir may hold what an agent left (or a hibernated session's restored state):
// every write stays inside it through an os.Root, and files are replaced
// atomically, never followed; OneShotDir, the state and the home directory must be
// directories (a symbolic link or a file there is refused with an error wrapping
// port.ErrInvalidSpec). The checks and errors are otherwise Prepare's.
func (o OneShot) PrepareNext(hostDir string, cfg *Config, files Files, prompt string) error {
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
	if err := checkPrompt(prompt); err != nil {
		return err
	}
	rendered, err := files.render()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return port.Invalidf("openclaw one-shot: workspace %q is not an existing directory", hostDir)
	}
	defer root.Close()
	if err := keepDir(root, OneShotDir, 0o755); err != nil {
		return err
	}
	d, err := root.OpenRoot(OneShotDir)
	if err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	defer d.Close()
	for _, sub := range []string{StateDirName, HomeDirName} {
		if err := keepDir(d, sub, 0o777); err != nil {
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

// keepDir makes sure name is a directory in root: kept as it is when it is one,
// made (with mode) when missing, refused when it is anything else.
func keepDir(root *os.Root, name string, mode os.FileMode) error {
	fi, err := root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return port.Invalidf("openclaw workspace: %s is not a directory (%v)", name, fi.Mode().Type())
	case os.IsNotExist(err):
		return makeDir(root, name, mode)
	default:
		return fmt.Errorf("openclaw workspace: %w", err)
	}
}

// HibernateExclude are the paths of a one-shot workspace (OneShotDir) a hibernated
// session leaves out of its saved state (sandbox.HibernateOptions.Exclude): where
// OpenClaw 2026.9.6 keeps credentials and identities of its own (OAuth
// credentials, device identity and pairings, per-agent provider auth profiles),
// its per-process lock files, and HOME's caches. The conversation itself (the
// session store and transcripts, in the state databases) is kept.
var HibernateExclude = []string{
	OneShotDir + "/" + StateDirName + "/credentials",
	OneShotDir + "/" + StateDirName + "/identity",
	OneShotDir + "/" + StateDirName + "/devices",
	OneShotDir + "/" + StateDirName + "/agents/*/agent/auth-profiles.json",
	OneShotDir + "/" + StateDirName + "/tmp",
	OneShotDir + "/" + HomeDirName + "/.cache",
}
