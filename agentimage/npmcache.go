package agentimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// DefaultNPMCacheDir is where Node keeps installed dependencies when NodeApp.CacheDir
// is empty: agentsandbox/npm under the user's cache directory (os.UserCacheDir), or
// under the temporary directory when there is none.
func DefaultNPMCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "agentsandbox", "npm")
}

// MaxNPMCacheEntries bounds the installs a cache directory keeps: adding one removes
// the least recently used beyond it.
const MaxNPMCacheEntries = 8

// npmArgs are the install's flags after the verb (part of the cache key).
var npmArgs = []string{"--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"}

// lockfiles are the files that pin an install exactly, npm's order of preference.
var lockfiles = []string{"npm-shrinkwrap.json", "package-lock.json"}

// npmCacheKey is the key of app's install: package.json, the lockfile, the install's
// flags, and the node version and platform (optional dependencies differ by them).
// ok is false without a lockfile: an install that resolves ranges is not repeatable.
func npmCacheKey(ctx context.Context, app NodeApp, nodeBin string) (key string, ok bool, err error) {
	h := sha256.New()
	fmt.Fprintf(h, "agentimage npm 1\n%s/%s\n%s\n", runtime.GOOS, runtime.GOARCH, strings.Join(npmArgs, " "))
	ver, err := exec.CommandContext(ctx, nodeBin, "--version").Output()
	if err != nil {
		return "", false, fmt.Errorf("agentimage: %s --version: %w", nodeBin, err)
	}
	fmt.Fprintf(h, "node %s\n", strings.TrimSpace(string(ver)))
	for _, f := range append([]string{"package.json"}, lockfiles...) {
		b, err := os.ReadFile(filepath.Join(app.Dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		ok = ok || f != "package.json"
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], ok, nil
}

// privateDir makes dir (mode 0700) if needed and checks that only this user can
// write it: an install another user could change would put their code in the image.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 || (ok && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("agentimage: npm cache %s is not a directory only this user can write", dir)
	}
	return nil
}

// cachedInstall returns the node_modules of app's install from the cache under dir,
// installing it there first if the cache does not have it (hit says which). An install
// goes to a temporary directory, renamed into place when complete, so a concurrent
// builder (another process) never sees half of one.
func cachedInstall(ctx context.Context, app NodeApp, dir, key string) (modules string, hit bool, err error) {
	if err := privateDir(dir); err != nil {
		return "", false, err
	}
	entry := filepath.Join(dir, key)
	modules = filepath.Join(entry, "node_modules")
	if fi, err := os.Lstat(modules); err == nil && fi.IsDir() {
		now := time.Now()
		_ = os.Chtimes(entry, now, now) // recently used: trimmed last
		return modules, true, nil
	}
	tmp, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp) // only what the rename did not take
	if _, err := npmInstall(ctx, app, tmp); err != nil {
		return "", false, err
	}
	// Only the install goes in: package.json and the lockfile are in the key.
	for _, f := range append([]string{"package.json"}, lockfiles...) {
		_ = os.Remove(filepath.Join(tmp, f))
	}
	if err := os.Rename(tmp, entry); err != nil {
		if fi, serr := os.Lstat(modules); serr == nil && fi.IsDir() {
			return modules, false, nil // another builder put the same install there first
		}
		return "", false, err
	}
	trimCache(dir, entry)
	return modules, false, nil
}

// trimCache removes the least recently used installs beyond MaxNPMCacheEntries, never
// keep (the one just added), and leftovers of interrupted installs older than an hour.
func trimCache(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type used struct {
		path string
		at   time.Time
	}
	var installs []used
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".install-") {
			if time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(p)
			}
			continue
		}
		if p != keep {
			installs = append(installs, used{p, fi.ModTime()})
		}
	}
	sort.Slice(installs, func(i, j int) bool { return installs[i].at.After(installs[j].at) })
	for i, u := range installs {
		if i+1 >= MaxNPMCacheEntries {
			_ = os.RemoveAll(u.path)
		}
	}
}
