package agentimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/port"
)

// Where Node puts things in the image.
const (
	// NodeBin is the node binary in a Node image, on PATH.
	NodeBin = "/usr/local/bin/node"
	// AppPath holds the application: its package.json, its entry script and its
	// node_modules (Node), or its script (Python).
	AppPath = "/app"
)

// NodeApp describes a Node.js agent for Node.
type NodeApp struct {
	// Name is the image's repository, such as "example.com/my-agent".
	Name string
	// Dir is the application's directory on the host: its package.json (and
	// package-lock.json, if any), its entry script and whatever other files it
	// needs. Everything in it but node_modules and dot files goes to AppPath.
	Dir string
	// Entry is the entry script, relative to Dir (such as "agent.mjs"); the image
	// runs `node /app/<Entry>`.
	Entry string
	// NodeModules, if set, is an existing node_modules directory to take the
	// dependencies from instead of installing them: only the closure of
	// package.json's dependencies is packed, and a missing one is an error.
	// Without it, the dependencies are installed from the npm registry (npm ci with
	// a lockfile, else npm install), production dependencies only, with install
	// scripts off; with a lockfile, once per CacheDir.
	NodeModules string
	// Node is the host's node binary to pack (default: node on PATH). Its shared
	// libraries come with it; it must be able to run the agent.
	Node string
	// NPM is the npm command used to install (default: npm on PATH).
	NPM string
	// Env is added to the image's environment (KEY=value).
	Env []string
	// CacheDir keeps installs from the npm registry for the next build with the same
	// package.json, lockfile, node version and platform (default DefaultNPMCacheDir;
	// at most MaxNPMCacheEntries installs, the least recently used removed first). An
	// app without a lockfile (package-lock.json or npm-shrinkwrap.json) is installed
	// afresh every time: its ranges may resolve to other versions. The directory must
	// be writable by this user only. The image's files are read from the cache when
	// its archive is written.
	CacheDir string
	// NoCache installs afresh every time, in a scratch directory.
	NoCache bool
}

// MissingDependencyError reports a package the application needs that its
// node_modules does not have: the builder found it missing, not the agent at run time.
// It wraps errdefs.ErrInvalidSpec.
type MissingDependencyError struct {
	// Package is the missing package's name.
	Package string
	// RequiredBy is the chain of packages that requires it, from the application.
	RequiredBy []string
}

// Error implements error.
func (e *MissingDependencyError) Error() string {
	return fmt.Sprintf("agentimage: package %q, required by %s, is not installed", e.Package, strings.Join(e.RequiredBy, " -> "))
}

// Unwrap returns errdefs.ErrInvalidSpec.
func (e *MissingDependencyError) Unwrap() error { return errdefs.ErrInvalidSpec }

// Node builds an image that runs a Node.js agent: the host's node binary and its
// shared libraries, the application at AppPath with its dependency closure in
// AppPath/node_modules, the sandbox user, and the mount points the runners use.
// The closure is found from package.json by Node's own resolution rules (a package
// is looked up in node_modules directories from the requiring package upwards):
// dependencies and non-optional peer dependencies must be present; optional ones
// are packed when installed. Errors: errdefs.ErrInvalidSpec for a bad app (no
// package.json, an entry outside Dir, a *MissingDependencyError); npm's output when
// an install fails.
func Node(ctx context.Context, app NodeApp) (Image, error) {
	if app.Entry == "" || !filepath.IsLocal(app.Entry) {
		return Image{}, errdefs.Invalidf("agentimage: entry %q is not a path inside the app directory", app.Entry)
	}
	if _, err := os.Stat(filepath.Join(app.Dir, app.Entry)); err != nil {
		return Image{}, errdefs.Invalidf("agentimage: entry: %v", err)
	}
	pkg, err := readPackage(filepath.Join(app.Dir, "package.json"))
	if err != nil {
		return Image{}, errdefs.Invalidf("agentimage: %v", err)
	}
	nodeBin := app.Node
	if nodeBin == "" {
		if nodeBin, err = exec.LookPath("node"); err != nil {
			return Image{}, fmt.Errorf("agentimage: node is not installed on the host: %w", err)
		}
	}
	modules := app.NodeModules
	// inline is set when the dependencies come from a scratch install removed on
	// return: their content is read into the image's files then.
	inline := false
	if modules == "" {
		key, lockfile, err := npmCacheKey(ctx, app, nodeBin)
		if err != nil {
			return Image{}, err
		}
		if lockfile && !app.NoCache {
			dir := app.CacheDir
			if dir == "" {
				dir = DefaultNPMCacheDir()
			}
			if modules, _, err = cachedInstall(ctx, app, dir, key); err != nil {
				return Image{}, err
			}
		} else {
			tmp, err := os.MkdirTemp("", "agentimage-npm-*")
			if err != nil {
				return Image{}, err
			}
			defer os.RemoveAll(tmp)
			if modules, err = npmInstall(ctx, app, tmp); err != nil {
				return Image{}, err
			}
			inline = true
		}
	}
	closure, err := nodeClosure(modules, pkg)
	if err != nil {
		return Image{}, err
	}
	files, err := HostBinary(ctx, nodeBin, NodeBin)
	if err != nil {
		return Image{}, err
	}
	files = WithDirs(files, AppPath)
	// The app's own files: not its node_modules (the closure below replaces it), not
	// dot files (.git, .env: secrets have no business in an image).
	appFiles, err := dirFiltered(app.Dir, AppPath, func(rel string) bool {
		first, _, _ := strings.Cut(rel, "/")
		return first == "node_modules" || strings.HasPrefix(path.Base(rel), ".")
	})
	if err != nil {
		return Image{}, err
	}
	files = append(files, appFiles[1:]...) // [0] is AppPath itself
	packed, err := closureFiles(modules, closure, inline)
	if err != nil {
		return Image{}, err
	}
	files = append(files, packed...)
	files = withSandboxBase(files)
	return Image{
		Name:       app.Name,
		Entrypoint: []string{NodeBin, AppPath + "/" + filepath.ToSlash(app.Entry)},
		Env:        append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "NODE_ENV=production"}, app.Env...),
		User:       port.DefaultUser,
		Files:      files,
	}, nil
}

// closureFiles packs the dependency closure (package directories relative to
// modules) under AppPath/node_modules, with the parent directories it needs; inline
// reads the files' content now (modules is removed on Node's return).
func closureFiles(modules string, closure []string, inline bool) ([]File, error) {
	var files []File
	if len(closure) > 0 {
		files = append(files, File{Path: AppPath + "/node_modules", Mode: 0o755, Dir: true})
	}
	dirs := map[string]bool{}
	for _, rel := range closure {
		// Scoped packages (@scope/name) and nested node_modules need their parents.
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var parents []string
	for d := range dirs {
		parents = append(parents, d)
	}
	sort.Strings(parents)
	for _, d := range parents {
		if isPackageDir(closure, d) {
			continue
		}
		files = append(files, File{Path: AppPath + "/node_modules/" + d, Mode: 0o755, Dir: true})
	}
	for _, rel := range closure {
		// A package's own node_modules is packed only as far as the closure reaches.
		pf, err := dirFiltered(filepath.Join(modules, filepath.FromSlash(rel)), AppPath+"/node_modules/"+rel, func(r string) bool { return r == "node_modules" })
		if err != nil {
			return nil, err
		}
		if inline {
			if err := readSources(pf); err != nil {
				return nil, err
			}
		}
		files = append(files, pf...)
	}
	return files, nil
}

func isPackageDir(closure []string, d string) bool {
	i := sort.SearchStrings(closure, d)
	return i < len(closure) && closure[i] == d
}

// withSandboxBase adds what every agent image has: /etc/passwd and /etc/group with
// the sandbox user, a sticky /tmp, and the directories the runners mount over.
func withSandboxBase(files []File) []File {
	files = WithDirs(files, "/etc", "/run", port.WorkspacePath, port.LLMSocketDir, "/proc", "/sys", "/dev")
	return append(files,
		File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/usr/sbin/nologin\nsandbox:x:1001:1001:sandbox:" + port.WorkspacePath + ":/usr/sbin/nologin\n")},
		File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nsandbox:x:1001:\n")},
		File{Path: "/tmp", Mode: 0o777 | fs.ModeSticky, Dir: true},
	)
}

type packageJSON struct {
	Name                 string                             `json:"name"`
	Dependencies         map[string]string                  `json:"dependencies"`
	OptionalDependencies map[string]string                  `json:"optionalDependencies"`
	PeerDependencies     map[string]string                  `json:"peerDependencies"`
	PeerDependenciesMeta map[string]struct{ Optional bool } `json:"peerDependenciesMeta"`
}

func readPackage(p string) (packageJSON, error) {
	var pkg packageJSON
	b, err := os.ReadFile(p)
	if err != nil {
		return pkg, err
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return pkg, fmt.Errorf("%s: %v", p, err)
	}
	return pkg, nil
}

// npmInstall installs app's production dependencies into dir and returns its
// node_modules.
func npmInstall(ctx context.Context, app NodeApp, dir string) (string, error) {
	npm := app.NPM
	if npm == "" {
		var err error
		if npm, err = exec.LookPath("npm"); err != nil {
			return "", fmt.Errorf("agentimage: npm is not installed on the host (apt-get install npm), and no NodeModules was given: %w", err)
		}
	}
	args := []string{"install"}
	for _, f := range []string{"package.json", "package-lock.json", "npm-shrinkwrap.json"} {
		b, err := os.ReadFile(filepath.Join(app.Dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if f != "package.json" {
			args[0] = "ci" // a lockfile: exactly what it pins
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return "", err
		}
	}
	args = append(args, "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("agentimage: npm %s in a copy of %s: %w\n%s", args[0], app.Dir, err, tail(out, 4096))
	}
	return filepath.Join(dir, "node_modules"), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// nodeClosure returns the package directories, relative to modules and with forward
// slashes (such as "openai" or "a/node_modules/b"), that pkg's dependencies need,
// resolved as Node resolves a bare specifier: from the requiring package's
// directory up through each enclosing node_modules.
func nodeClosure(modules string, root packageJSON) ([]string, error) {
	seen := map[string]bool{}
	type item struct {
		from  string // the requiring package's dir relative to modules ("" for the app)
		name  string
		chain []string
		must  bool
	}
	var queue []item
	add := func(from string, pkg packageJSON, chain []string) {
		names := func(m map[string]string, must bool) {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				queue = append(queue, item{from: from, name: k, chain: chain, must: must})
			}
		}
		names(pkg.Dependencies, true)
		names(pkg.OptionalDependencies, false)
		for k := range pkg.PeerDependencies {
			queue = append(queue, item{from: from, name: k, chain: chain, must: !pkg.PeerDependenciesMeta[k].Optional})
		}
	}
	rootName := root.Name
	if rootName == "" {
		rootName = "(app)"
	}
	add("", root, []string{rootName})
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		rel, ok := resolveNode(modules, it.from, it.name)
		if !ok {
			if it.must {
				return nil, &MissingDependencyError{Package: it.name, RequiredBy: it.chain}
			}
			continue
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		pkg, err := readPackage(filepath.Join(modules, filepath.FromSlash(rel), "package.json"))
		if err != nil {
			return nil, errdefs.Invalidf("agentimage: %v", err)
		}
		add(rel, pkg, append(append([]string(nil), it.chain...), it.name))
	}
	out := make([]string, 0, len(seen))
	for rel := range seen {
		out = append(out, rel)
	}
	sort.Strings(out)
	return out, nil
}

// resolveNode finds name from the package at from (relative to modules): in
// from/node_modules/name, then in each enclosing node_modules, up to modules itself.
func resolveNode(modules, from, name string) (string, bool) {
	for dir := from; ; {
		cand := name
		if dir != "" {
			cand = dir + "/node_modules/" + name
		}
		if st, err := os.Stat(filepath.Join(modules, filepath.FromSlash(cand), "package.json")); err == nil && st.Mode().IsRegular() {
			return cand, true
		}
		if dir == "" {
			return "", false
		}
		// Up to the enclosing package: strip "/node_modules/<pkg>" (scoped: two parts).
		i := strings.LastIndex(dir, "/node_modules/")
		if i < 0 {
			dir = ""
		} else {
			dir = dir[:i]
		}
	}
}
