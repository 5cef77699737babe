package gitcli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// ExporterPackage is the import path of the exporter's main package.
const ExporterPackage = "github.com/agentsandbox/sandbox/cmd/sandbox-git-export"

var buildMu sync.Mutex
var built = map[string]string{} // outDir -> binary, for repeated calls in one process

// BuildExporter compiles cmd/sandbox-git-export as a static Linux binary (CGO_ENABLED=0,
// -trimpath, stripped, for the host's architecture) into outDir and returns its path.
//
// The file is named after a hash of every source file that goes into it (this module's
// and its dependencies') and of the Go version, so a call finds an up-to-date binary
// from an earlier process without building, and a changed source gives a new file.
// Within one process, later calls for the same outDir return at once. It needs the go
// command and the module's sources, so it serves tests and the project's scripts, not
// production hosts (which ship the binary).
func BuildExporter(ctx context.Context, outDir string) (string, error) {
	abs, err := filepath.Abs(outDir)
	if err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[abs]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("gitcli: build: the go command is needed: %w", err)
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	dir := sourceDir()
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Env, cmd.Dir = env, dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("gitcli: go %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}

	ver, err := run("env", "GOVERSION")
	if err != nil {
		return "", err
	}
	list, err := run("list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, ExporterPackage)
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
		for _, name := range parts[1:] {
			if err := hashFile(h, filepath.Join(parts[0], name)); err != nil {
				return "", fmt.Errorf("gitcli: build: %w", err)
			}
		}
	}
	out := filepath.Join(abs, "sandbox-git-export-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		built[abs] = out
		return out, nil
	}

	tmp, err := os.CreateTemp(abs, ".sandbox-git-export-*")
	if err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if _, err := run("build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", tmp.Name(), ExporterPackage); err != nil {
		return "", err
	}
	// The sandbox user (not the builder) executes it from a read-only mount.
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("gitcli: build: %w", err)
	}
	built[abs] = out
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

// sourceDir is a directory inside the module holding this package, where go list and
// go build resolve the exporter's import path: this file's directory when the sources are
// present (tests, go run), else the working directory.
func sourceDir() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if d := filepath.Dir(file); isDir(d) {
			return d
		}
	}
	return ""
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
