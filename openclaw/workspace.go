package openclaw

import (
	"os"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/port"
)

// Workspace file names OpenClaw reads from the agent's workspace at the start of
// a session and puts into the system prompt.
const (
	AgentsFile = "AGENTS.md"
	SoulFile   = "SOUL.md"
)

// MaxWorkspaceFileChars is the most a workspace file may hold, in UTF-16 code
// units (how OpenClaw counts): its default bootstrapMaxChars. OpenClaw would
// truncate a longer file silently; WriteWorkspace refuses it instead.
const MaxWorkspaceFileChars = 20000

// Files are the host-provided texts that shape the agent.
type Files struct {
	// Agents is the main operating instructions (AGENTS.md).
	Agents string
	// Soul is the agent's persona and tone (SOUL.md).
	Soul string
	// Tools are environment-specific tool notes. OpenClaw 2026.7 retired the
	// separate TOOLS.md (it is no longer injected; `openclaw doctor` folds it into
	// AGENTS.md), so they are written as a "## Tools" section of AGENTS.md.
	Tools string
}

// WriteWorkspace writes the non-empty files into dir (which must exist) with mode
// 0644. It refuses text that is not UTF-8, holds NUL bytes, or is longer than
// MaxWorkspaceFileChars, with an error wrapping port.ErrInvalidSpec; nothing is
// written then, nor when dir is not an existing directory (also ErrInvalidSpec).
//
// dir may be a workspace an agent has used: every write stays inside it (through an
// os.Root), and each file is replaced atomically, so whatever an agent left at a
// file name (a symlink, a hard link, a FIFO, a directory) is replaced, never
// followed, opened or written through. Other errors are the file system's.
func WriteWorkspace(dir string, f Files) error {
	files, err := f.render()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return port.Invalidf("openclaw workspace %q is not an existing directory", dir)
	}
	defer root.Close()
	return writeWorkspace(root, files)
}

// writeWorkspace writes rendered files into the workspace root.
func writeWorkspace(root *os.Root, files []namedText) error {
	for _, w := range files {
		if w.text == "" {
			continue
		}
		if err := writeFileIn(root, w.name, []byte(w.text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type namedText struct{ name, text string }

// render returns the files to write, checked.
func (f Files) render() ([]namedText, error) {
	agents := f.Agents
	if strings.TrimSpace(f.Tools) != "" {
		agents = strings.TrimRight(agents, "\n")
		if agents != "" {
			agents += "\n\n"
		}
		agents += "## Tools\n\n" + strings.TrimRight(f.Tools, "\n") + "\n"
	}
	files := []namedText{{AgentsFile, agents}, {SoulFile, f.Soul}}
	for _, w := range files {
		if err := checkText(w.name, w.text, MaxWorkspaceFileChars); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func checkText(name, text string, maxUnits int) error {
	if !utf8.ValidString(text) {
		return port.Invalidf("openclaw %s is not valid UTF-8", name)
	}
	if strings.ContainsRune(text, 0) {
		return port.Invalidf("openclaw %s contains a NUL byte", name)
	}
	if n := utf16Len(text); n > maxUnits {
		return port.Invalidf("openclaw %s is %d characters, over the limit of %d", name, n, maxUnits)
	}
	return nil
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
