package openclaw

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
)

// Host writes into a workspace an agent has used. Everything under the workspace
// may be the agent's: a symlink to a host path, a hard link to a host file, a FIFO,
// a huge file, a directory where a file belongs. So every operation goes through an
// os.Root opened on the workspace (no path resolves outside it), files are written
// under a fresh name and renamed over the old entry (which replaces a link or FIFO
// without following or opening it), and directories the host owns are recreated,
// never reused, chmodded or MkdirAll'd. Nothing here reads the agent's files.

// randSuffix names temporary and moved-aside entries.
func randSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// clearEntry moves whatever is at name out of the way without following it, then
// removes it as far as it can: an agent's tree may hold entries the host may not
// delete (a directory of the sandbox user without write permission), and those must
// not stop the next run.
func clearEntry(root *os.Root, name string) error {
	if _, err := root.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	aside := path.Join(path.Dir(name), "."+path.Base(name)+".old-"+randSuffix())
	if err := root.Rename(name, aside); err != nil {
		return err
	}
	_ = root.RemoveAll(aside) // best effort; RemoveAll removes links, never their targets
	return nil
}

// makeDir recreates the directory name with exactly mode: what was there is moved
// aside first, and the mode is set on the new directory's descriptor, whatever the
// umask.
func makeDir(root *os.Root, name string, mode fs.FileMode) error {
	if err := clearEntry(root, name); err != nil {
		return fmt.Errorf("openclaw workspace: clear %s: %w", name, err)
	}
	if err := root.Mkdir(name, 0o700); err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	d, err := root.Open(name)
	if err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return fmt.Errorf("openclaw workspace: %s was replaced while it was created", name)
	}
	if err := d.Chmod(mode); err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	return nil
}

// writeFileIn writes data to name inside root with exactly mode, atomically: a new
// file under a fresh name is renamed over whatever name was, so a symlink, hard link
// or FIFO there is replaced, never followed or opened; a directory there is moved
// aside first.
func writeFileIn(root *os.Root, name string, data []byte, mode fs.FileMode) (err error) {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".tmp-"+randSuffix())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("openclaw workspace: %w", err)
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode) // the exact mode, whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("openclaw workspace: write %s: %w", name, err)
	}
	if err = root.Rename(tmp, name); err != nil {
		// Rename cannot replace a directory: move it aside and try once more.
		if cerr := clearEntry(root, name); cerr != nil {
			return fmt.Errorf("openclaw workspace: replace %s: %w", name, errors.Join(err, cerr))
		}
		if err = root.Rename(tmp, name); err != nil {
			return fmt.Errorf("openclaw workspace: replace %s: %w", name, err)
		}
	}
	return nil
}
