package gobuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

var (
	cachedMu sync.Mutex
	cached   = map[string]string{} // dir + pkg -> binary, for repeated calls in one process
)

// Cached compiles the main package pkg of this module as a static binary into dir,
// named name-<hash>, and returns its path. The hash covers every source file that goes
// into it (this module's and its dependencies') and the Go version, so a call finds an
// up-to-date binary from an earlier process without building, and a changed source
// gives a new file. The binary is made world-executable (a sandbox user runs it from a
// read-only mount) and renamed into place whole, so concurrent builds are safe.
func Cached(ctx context.Context, pkg, name, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	key := abs + "\x00" + pkg
	cachedMu.Lock()
	defer cachedMu.Unlock()
	if p, ok := cached[key]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	src := ModuleDir()
	ver, err := Go(ctx, src, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	list, err := Go(ctx, src, "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, pkg)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", bytes.TrimSpace(ver), runtime.GOARCH)
	for line := range strings.Lines(string(list)) {
		parts := strings.Split(strings.TrimSpace(line), "|")
		if len(parts) < 2 {
			continue
		}
		for _, f := range parts[1:] {
			if err := hashFile(h, filepath.Join(parts[0], f)); err != nil {
				return "", err
			}
		}
	}
	out := filepath.Join(abs, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		cached[key] = out
		return out, nil
	}
	tmp, err := os.CreateTemp(abs, "."+name+"-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := Static(ctx, src, pkg, tmp.Name()); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	cached[key] = out
	return out, nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\n", filepath.Base(path))
	_, err = io.Copy(h, f)
	return err
}

// ForgetCached forgets what Cached built in this process, as a new process would; for
// tests of the on-disk cache.
func ForgetCached() {
	cachedMu.Lock()
	defer cachedMu.Unlock()
	clear(cached)
}
