// Package gobuild runs the go command to compile main packages as static Linux
// binaries, for the packages that build images and the bridge with the local toolchain.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Env is the environment of every build: no cgo (the binaries run in FROM scratch
// images), Linux on the host's architecture (the runtimes run local containers).
func Env() []string {
	return append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
}

// Go runs the go command with args in dir (the working directory when dir is empty)
// and returns its standard output; a failure carries the command's standard error.
//
// In a directory of its own (ModuleDir) the module is read-only whatever GOFLAGS says:
// a caller's -mod=mod must not rewrite this module's go.mod, which may also sit in the
// read-only module cache.
func Go(ctx context.Context, dir string, args ...string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Env, cmd.Dir = Env(), dir
	if dir != "" {
		cmd.Env = append(cmd.Env, "GOFLAGS="+readOnly(os.Getenv("GOFLAGS")))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// readOnly is goflags with any -mod setting replaced by -mod=readonly.
func readOnly(goflags string) string {
	var keep []string
	for _, f := range strings.Fields(goflags) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(append(keep, "-mod=readonly"), " ")
}

// Static compiles the main package pkg, resolved in dir, into the file out: static,
// trimmed paths, stripped and without a build ID, so the same sources give the same bytes.
func Static(ctx context.Context, dir, pkg, out string) error {
	_, err := Go(ctx, dir, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	return err
}

// StaticBytes is Static into a temporary file, returning the binary's bytes.
func StaticBytes(ctx context.Context, dir, pkg string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "agentsandbox-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	if err := Static(ctx, dir, pkg, out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// ModuleDir is the root of this module's sources when they are on disk (in this
// repository, or in another module through a replace directive or the module cache),
// so that this module's packages resolve with this module's requirements. It is empty
// when the sources are not there (a binary built with -trimpath), and the go command
// then resolves packages in the working directory's module.
func ModuleDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/gobuild/gobuild.go
	if fi, err := os.Stat(filepath.Join(root, "go.mod")); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return root
}
