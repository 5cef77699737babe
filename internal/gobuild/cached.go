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
	"runtime/debug"
	"strings"
	"sync"
)

var (
	cachedMu sync.Mutex
	cached   = map[string]string{} // dir + pkg -> binary, for repeated calls in one process
)

// Cached compiles the main package pkg of this module as a static binary into dir,
// named name-<key>, and returns its path. When this module is a released version
// (from the module cache, with its checksum), the key is that version and checksum:
// a later process finds the binary by name alone, without running the go command,
// so a host without a Go toolchain runs on a cache seeded where there was one.
// Otherwise (this repository, a replace directive) the key is a hash of every source
// file that goes into the binary (this module's and its dependencies') and of the Go
// version, found with the go command, so a changed source gives a new file. The binary is made world-executable (a sandbox user runs it from a
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
	// A released version of this module names its sources exactly: the binary built
	// from them is found again by that name alone, with no go command (a host
	// without a toolchain runs on a cache seeded where there was one).
	if v := versionKey(buildInfo()); v != "" {
		return found(ctx, key, src, pkg, name, abs, filepath.Join(abs, name+"-"+v))
	}
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
	return found(ctx, key, src, pkg, name, abs, filepath.Join(abs, name+"-"+hex.EncodeToString(h.Sum(nil))[:16]))
}

// found returns out, the binary's file under its key's name: the one there (an
// executable regular file), else built now from src's pkg into dir. It records it
// under key for this process (cachedMu held).
func found(ctx context.Context, key, src, pkg, name, dir, out string) (string, error) {
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		cached[key] = out
		return out, nil
	}
	if err := buildInto(ctx, src, pkg, name, dir, out); err != nil {
		return "", err
	}
	cached[key] = out
	return out, nil
}

// buildInto builds pkg into a temporary file in dir and renames it to out whole,
// world-executable.
func buildInto(ctx context.Context, src, pkg, name, dir, out string) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := Static(ctx, src, pkg, tmp.Name()); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// modulePath is this module's path.
const modulePath = "github.com/agentsandbox/sandbox"

// buildInfo is the running program's build information (a variable for tests).
var buildInfo = func() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// versionKey names the sources of this module in the running program when they
// are a released version from the module cache: the version and a digest of the
// module's checksum (go.sum's h1:, a hash of every file of that version) and of the
// architecture. It is "" for a development build (this repository, a replace
// directive, a pseudo-version without a checksum), whose sources must be hashed.
func versionKey(bi *debug.BuildInfo) string {
	if bi == nil {
		return ""
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m == nil || m.Path != modulePath || m.Replace != nil || m.Sum == "" || m.Version == "" || m.Version == "(devel)" {
			continue
		}
		h := sha256.Sum256([]byte(m.Sum + "\n" + runtime.GOARCH))
		return safeVersion(m.Version) + "-" + hex.EncodeToString(h[:])[:16]
	}
	return ""
}

// safeVersion keeps a version's file-name-safe characters.
func safeVersion(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '+' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
			return r
		}
		return '_'
	}, v)
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
