package sandboxbridge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// exposeAll listens, for each of cfg.Expose, on a unix socket named PORT.sock in
// cfg.ExposeDir and forwards every connection to 127.0.0.1:PORT: a long-running
// sandbox's host reaches a port its process listens on through that socket, and no
// network namespace is ever opened. It returns a function that closes them all.
func exposeAll(cfg Config, log *slog.Logger) (func(), error) {
	if len(cfg.Expose) == 0 {
		return func() {}, nil
	}
	if cfg.ExposeDir == "" || !filepath.IsAbs(cfg.ExposeDir) {
		return nil, fmt.Errorf("%w: exposing ports needs an absolute expose directory", ErrInvalidConfig)
	}
	var fws []*forwarder
	closeAll := func() {
		for _, f := range fws {
			f.close()
		}
	}
	for _, p := range cfg.Expose {
		if p < 1 || p > 65535 {
			closeAll()
			return nil, fmt.Errorf("%w: exposed port %d out of range", ErrInvalidConfig, p)
		}
		path := filepath.Join(cfg.ExposeDir, strconv.Itoa(p)+".sock")
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			closeAll()
			return nil, fmt.Errorf("bridge: expose %d: %w", p, err)
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("bridge: expose %d: %w", p, err)
		}
		// The host connects as root or as the sandbox's owner; nobody else needs it.
		_ = os.Chmod(path, 0o600)
		f := newForwarder(ln, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), log)
		f.network = "tcp"
		go f.serve()
		fws = append(fws, f)
	}
	return closeAll, nil
}
