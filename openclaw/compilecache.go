package openclaw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/agentsandbox/sandbox/port"
)

// CompileCacheTarget is where OpenClaw's launcher keeps Node's compile cache in a
// sandbox: os.tmpdir()/node-compile-cache, /tmp being the sandbox's temporary
// directory (the one-shot environment sets no TMPDIR). A cache mounted there is found
// without NODE_COMPILE_CACHE: that variable would make the launcher re-launch itself
// to move the cache under its own sub-directory.
const CompileCacheTarget = "/tmp/node-compile-cache"

// CompileCache is a warm Node compile cache for one OpenClaw version, kept on the host
// in Root/<version> and mounted read-only at CompileCacheTarget into every OpenClaw
// run, pre-booted or not: a sandbox's /tmp is fresh, so without it every run compiles
// OpenClaw's modules again (~1.2 s of a one-shot here).
//
// Node (24.x, checked on 24.21) reads a read-only cache and skips writing it, with no
// error and no change to the run's outcome; a cache that does not fit (another
// Node, another OpenClaw install: Node keys its entries by the module's path and
// checks each against its source) is ignored, so a stale cache costs time, never a
// failure.
//
// Build it with a run of your own (Build): the cache is code every later run
// executes, so it must never be written by an untrusted agent's run.
type CompileCache struct {
	root, version string
}

var cacheVersionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$`)

// NewCompileCache returns the compile cache of OpenClaw version under root (an
// absolute host directory). It does no I/O. Errors wrap port.ErrInvalidSpec.
func NewCompileCache(root, version string) (*CompileCache, error) {
	if !filepath.IsAbs(root) {
		return nil, port.Invalidf("openclaw compile cache root %q is not absolute", root)
	}
	if !cacheVersionRE.MatchString(version) {
		return nil, port.Invalidf("openclaw compile cache version %q must match %s", version, cacheVersionRE)
	}
	return &CompileCache{root: filepath.Clean(root), version: version}, nil
}

// Dir is the host directory of the built cache.
func (c *CompileCache) Dir() string { return filepath.Join(c.root, c.version) }

// Ready reports whether the cache was built.
func (c *CompileCache) Ready() bool {
	fi, err := os.Lstat(c.Dir())
	return err == nil && fi.IsDir()
}

// Mount is the cache's read-only mount for a run (RunSpec.Mounts, or a pool's
// Preload.Mounts), and false while it is not built.
func (c *CompileCache) Mount() (port.Mount, bool) {
	if !c.Ready() {
		return port.Mount{}, false
	}
	return port.Mount{Source: c.Dir(), Target: CompileCacheTarget}, true
}

// Build builds the cache unless it is built: it calls run with a writable mount of a
// fresh staging directory at CompileCacheTarget, for one OpenClaw run of the
// caller's own (a fixed prompt and config against a model the host trusts: never an
// agent's run), then makes what the run wrote read-only and moves it into place. A
// failed run, one that wrote nothing, or one that left anything but directories and
// regular files leaves nothing behind. Concurrent builders are safe: the first to
// finish wins, the others' work is removed.
func (c *CompileCache) Build(ctx context.Context, run func(context.Context, port.Mount) error) (err error) {
	if c.Ready() {
		return nil
	}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return fmt.Errorf("openclaw compile cache: %w", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	stage := filepath.Join(c.root, ".build-"+c.version+"-"+hex.EncodeToString(b))
	if err := os.Mkdir(stage, 0o700); err != nil {
		return fmt.Errorf("openclaw compile cache: %w", err)
	}
	defer func() {
		if err != nil {
			removeStage(stage)
		}
	}()
	// The sandbox's user is not the host's: the staging directory is its to fill.
	if err := os.Chmod(stage, 0o777); err != nil {
		return fmt.Errorf("openclaw compile cache: %w", err)
	}
	if err := run(ctx, port.Mount{Source: stage, Target: CompileCacheTarget, Writable: true}); err != nil {
		return fmt.Errorf("openclaw compile cache: the build run: %w", err)
	}
	files := 0
	err = filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Chmod(p, 0o555)
		case d.Type().IsRegular():
			files++
			return os.Chmod(p, 0o444)
		default:
			return fmt.Errorf("%w: %s is neither a directory nor a regular file", errBadCache, p)
		}
	})
	if err != nil {
		return fmt.Errorf("openclaw compile cache: %w", err)
	}
	if files == 0 {
		return fmt.Errorf("openclaw compile cache: %w: the build run wrote nothing (is OpenClaw's compile cache under %s?)", errBadCache, CompileCacheTarget)
	}
	if err := os.Rename(stage, c.Dir()); err != nil {
		if c.Ready() { // another builder finished first
			removeStage(stage)
			return nil
		}
		return fmt.Errorf("openclaw compile cache: %w", err)
	}
	return nil
}

var errBadCache = errors.New("not a compile cache")

// removeStage removes a staging directory, made read-only or not. It never follows
// a symlink (WalkDir and RemoveAll do not).
func removeStage(stage string) {
	_ = filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700) // so RemoveAll can empty it
		}
		return nil
	})
	_ = os.RemoveAll(stage)
}
