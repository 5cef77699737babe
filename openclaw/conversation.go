package openclaw

import (
	"fmt"
	"io/fs"
	"os"

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
	return o.prepare(hostDir, cfg, files, prompt, keepDir)
}

// keepDir makes sure name is a directory in root: kept as it is when it is one,
// made (with mode) when missing, refused when it is anything else.
func keepDir(root *os.Root, name string, mode fs.FileMode) error {
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
