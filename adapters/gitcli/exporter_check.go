package gitcli

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentsandbox/sandbox/port"
)

// checkExporter tells, before an agent runs, whether the export sandbox will be able
// to run the exporter: its directory is mounted read-only and the exporter executed
// as the sandbox user, so that user needs search permission on the directory and
// execute permission on the file. A directory made by os.MkdirTemp (0700, owned by
// the host) fails here, with the fix in the error, instead of at export time after
// the agent's work is done. Without an exporter configured there is nothing to
// check (Export refuses then).
func (r *Relay) checkExporter() error {
	if r.cfg.exporter == "" {
		return nil
	}
	bin := r.cfg.exporter
	dir := filepath.Dir(bin)
	for _, c := range []struct {
		path string
		want fs.FileMode // the execute bit of the class (search, for a directory)
		what string
	}{{dir, 0o1, "search (x) the exporter's directory"}, {bin, 0o1, "execute the exporter"}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			return port.Invalidf("exporter: %v", err)
		}
		if c.path == bin && !fi.Mode().IsRegular() {
			return port.Invalidf("exporter %s is not a regular file", bin)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // no owner to judge by: the export will tell
		}
		perm := fi.Mode().Perm()
		var shift uint
		switch {
		case int(st.Uid) == r.cfg.uid:
			shift = 6
		case int(st.Gid) == r.cfg.gid:
			shift = 3
		}
		if perm>>shift&c.want == 0 {
			return fmt.Errorf("%w: exporter: the sandbox user %s cannot %s: %s is mode %#o, owned by %d:%d (chmod a+x it, e.g. 0755: the export sandbox mounts the directory read-only and runs the exporter as that user)",
				port.ErrInvalidSpec, r.cfg.sandboxUser, c.what, c.path, perm, st.Uid, st.Gid)
		}
	}
	return nil
}
