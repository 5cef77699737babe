package agentimage

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/port"
)

// PythonApp describes a Python agent for Python.
type PythonApp struct {
	// Name is the image's repository.
	Name string
	// Dir is the application's directory on the host; everything in it but dot
	// files and __pycache__ goes to AppPath.
	Dir string
	// Entry is the script to run, relative to Dir: the image runs
	// `python3 /app/<Entry>`.
	Entry string
	// Python is the host interpreter to pack (default /usr/bin/python3, Debian's);
	// its standard library and shared libraries come with it.
	Python string
	// Venv, if set, is a virtual environment made with that interpreter (python3 -m
	// venv); its site-packages is packed at VenvSitePackages and put on PYTHONPATH.
	Venv string
	// Packages are Debian packages to pack as well (python3-yaml, say), with the
	// python3-* packages they depend on: for modules the entry script imports only
	// dynamically. Statically imported ones are found without being named.
	Packages []string
	// Env is added to the image's environment (KEY=value).
	Env []string
	// Optional names modules (such as "openai", or "openai.types") the entry script
	// may run without: missing, they are no error; found, they are packed. Modules the
	// script imports inside a try whose except catches ImportError,
	// ModuleNotFoundError, Exception or BaseException (or a bare except) are optional
	// without being named here.
	Optional []string
}

// VenvSitePackages is where Python puts a venv's site-packages in the image.
const VenvSitePackages = "/opt/venv/site-packages"

//go:embed python_probe.py
var pythonProbe string

// pythonInfo is what python_probe.py reports.
type pythonInfo struct {
	Executable string            `json:"executable"`
	Stdlib     string            `json:"stdlib"`
	Dynload    string            `json:"dynload"`
	SitePaths  []string          `json:"site_paths"`
	Modules    map[string]string `json:"modules"`
	Missing    []string          `json:"missing"`
	Guarded    []string          `json:"guarded"`
}

// required returns the missing modules the entry script cannot run without: those
// neither guarded by it nor named optional (a name covers its submodules).
func (p pythonInfo) required(optional []string) []string {
	opt := append(append([]string(nil), p.Guarded...), optional...)
	var out []string
	for _, m := range p.Missing {
		if !slices.ContainsFunc(opt, func(o string) bool { return m == o || strings.HasPrefix(m, o+".") }) {
			out = append(out, m)
		}
	}
	return out
}

// moduleName is a dotted Python module name.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// Python builds an image that runs a Python agent: the host's interpreter and the
// shared libraries it and every packed extension module link, its standard library
// (without its tests and GUI parts), the application at AppPath, and its dependency
// closure. The closure is found by the builder: Python's own modulefinder follows the
// entry script's imports; a module found in a system site directory brings its whole
// top-level package, and, when a Debian package owns it, that package's Python files
// and those of the python3-* packages it depends on; a module the entry script itself
// imports that cannot be found is a *MissingDependencyError (before anything runs),
// unless the script guards its import (try/except ImportError) or Optional names it.
// Imports made only dynamically (importlib, __import__) are not seen: name their
// Debian packages in Packages, or use a Venv, which is packed whole.
func Python(ctx context.Context, app PythonApp) (Image, error) {
	if app.Entry == "" || !filepath.IsLocal(app.Entry) || !strings.HasSuffix(app.Entry, ".py") {
		return Image{}, errdefs.Invalidf("agentimage: entry %q is not a .py path inside the app directory", app.Entry)
	}
	for _, m := range app.Optional {
		if !moduleName.MatchString(m) {
			return Image{}, errdefs.Invalidf("agentimage: optional module %q is not a module name", m)
		}
	}
	entry := filepath.Join(app.Dir, app.Entry)
	if fi, err := os.Stat(entry); err != nil || !fi.Mode().IsRegular() {
		return Image{}, errdefs.Invalidf("agentimage: entry %s is not a regular file", entry)
	}
	python := app.Python
	if python == "" {
		python = "/usr/bin/python3"
	}
	var venvSite string
	if app.Venv != "" {
		matches, _ := filepath.Glob(filepath.Join(app.Venv, "lib", "python3*", "site-packages"))
		if len(matches) != 1 {
			return Image{}, errdefs.Invalidf("agentimage: venv %s has no single lib/python3*/site-packages", app.Venv)
		}
		venvSite = matches[0]
	}
	info, err := probePython(ctx, python, entry, app.Dir, venvSite)
	if err != nil {
		return Image{}, err
	}
	if req := info.required(app.Optional); len(req) > 0 {
		return Image{}, &MissingDependencyError{Package: req[0], RequiredBy: []string{app.Entry}}
	}

	files, err := HostBinary(ctx, python, "/usr/bin/python3")
	if err != nil {
		return Image{}, err
	}
	set := newFileSet(files)
	add, addTree := set.add, set.addTree
	// The standard library, lib-dynload included, without what no agent imports.
	stdlibSkip := map[string]bool{"test": true, "idlelib": true, "tkinter": true, "turtledemo": true, "ensurepip": true,
		"site-packages": true, "dist-packages": true, "config-" + info.version() + "-x86_64-linux-gnu": true}
	if err := addTree(info.Stdlib, info.Stdlib, func(rel string) bool {
		first, _, _ := strings.Cut(rel, "/")
		return stdlibSkip[first] || noCache(rel) || strings.HasSuffix(rel, "/tests")
	}); err != nil {
		return Image{}, err
	}
	if info.Dynload != "" && !strings.HasPrefix(info.Dynload, info.Stdlib+"/") {
		if err := addTree(info.Dynload, info.Dynload, noCache); err != nil {
			return Image{}, err
		}
	}
	// The app, then the venv.
	appFiles, err := dirFiltered(app.Dir, AppPath, func(rel string) bool {
		return strings.HasPrefix(path.Base(rel), ".") || noCache(rel)
	})
	if err != nil {
		return Image{}, err
	}
	set.files = WithDirs(set.files, AppPath)
	add(appFiles[1:])
	env := []string{"PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
	if venvSite != "" {
		if err := addTree(venvSite, VenvSitePackages, noCache); err != nil {
			return Image{}, err
		}
		env = append(env, "PYTHONPATH="+VenvSitePackages)
	}
	if err := set.addSiteModules(ctx, app, info); err != nil {
		return Image{}, err
	}
	if err := set.addSharedLibs(ctx, app.Dir, venvSite); err != nil {
		return Image{}, err
	}
	files = withSandboxBase(dedupe(set.files))
	return Image{
		Name:       app.Name,
		Entrypoint: []string{"/usr/bin/python3", AppPath + "/" + filepath.ToSlash(app.Entry)},
		Env:        append(env, app.Env...),
		User:       port.DefaultUser,
		Files:      files,
	}, nil
}

// fileSet gathers an image's files, each path once (the first one added wins).
type fileSet struct {
	files []File
	have  map[string]bool
}

func newFileSet(files []File) *fileSet {
	s := &fileSet{files: files, have: map[string]bool{}}
	for _, f := range files {
		s.have[f.Path] = true
	}
	return s
}

// add adds the files of fs whose paths are not in the set yet.
func (s *fileSet) add(fs []File) {
	for _, f := range fs {
		if !s.have[f.Path] {
			s.have[f.Path] = true
			s.files = append(s.files, f)
		}
	}
}

// addTree adds the tree at src as dst (with dst's parent directories), less what
// skip names.
func (s *fileSet) addTree(src, dst string, skip func(rel string) bool) error {
	fs, err := dirFiltered(src, dst, skip)
	if err != nil {
		return err
	}
	s.files = WithDirs(s.files, path.Dir(dst))
	s.add(fs)
	return nil
}

// noCache skips a tree's __pycache__ directories.
func noCache(rel string) bool { return path.Base(rel) == "__pycache__" }

// addSiteModules adds the third-party modules found in the system's site
// directories: each one's top-level package, and the Debian packages that own them
// (with app.Packages) and their python3-* dependencies.
func (s *fileSet) addSiteModules(ctx context.Context, app PythonApp, info pythonInfo) error {
	debs := map[string][]string{}
	for _, p := range app.Packages {
		debs[p] = []string{"(Packages)"}
	}
	for name, file := range info.Modules {
		site := ""
		for _, sp := range info.SitePaths {
			if strings.HasPrefix(file, sp+"/") {
				site = sp
			}
		}
		if site == "" {
			continue // stdlib, app or venv: packed whole
		}
		rel := strings.TrimPrefix(file, site+"/")
		top, _, nested := strings.Cut(rel, "/")
		src := filepath.Join(site, top)
		if !nested {
			src = file
		}
		if err := s.addTree(src, src, noCache); err != nil {
			return err
		}
		if pkg := debianOwner(ctx, file); pkg != "" {
			if _, ok := debs[pkg]; !ok {
				debs[pkg] = []string{app.Entry, name}
			}
		}
	}
	debFiles, err := debianClosure(ctx, debs)
	if err != nil {
		return err
	}
	for _, p := range debFiles {
		fi, err := os.Lstat(p)
		if err != nil || (!fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0) {
			continue
		}
		f, err := Dir(p, p)
		if err != nil {
			return err
		}
		s.files = WithDirs(s.files, path.Dir(p))
		s.add(f)
	}
	return nil
}

// addSharedLibs adds the host's shared libraries that the set's extension modules
// (its .so files outside the system library directories) link.
func (s *fileSet) addSharedLibs(ctx context.Context, appDir, venvSite string) error {
	var sos []string
	for _, f := range s.files {
		if f.Link == "" && !f.Dir && strings.HasSuffix(f.Path, ".so") && !strings.HasPrefix(f.Path, "/lib") && !strings.HasPrefix(f.Path, "/usr/lib/x86_64-linux-gnu") {
			sos = append(sos, hostPathOf(f.Path, appDir, venvSite))
		}
	}
	libs, err := sharedLibs(ctx, sos)
	if err != nil {
		return err
	}
	for _, l := range libs {
		s.files = WithDirs(s.files, path.Dir(l.Path))
		s.add([]File{l})
	}
	return nil
}

func (p pythonInfo) version() string {
	return strings.TrimPrefix(path.Base(p.Stdlib), "python")
}

// hostPathOf maps an image path back to the host file it was packed from.
func hostPathOf(p, appDir, venvSite string) string {
	switch {
	case strings.HasPrefix(p, AppPath+"/"):
		return filepath.Join(appDir, strings.TrimPrefix(p, AppPath+"/"))
	case venvSite != "" && strings.HasPrefix(p, VenvSitePackages+"/"):
		return filepath.Join(venvSite, strings.TrimPrefix(p, VenvSitePackages+"/"))
	}
	return p
}

// probePython runs the interpreter's modulefinder on the entry script.
func probePython(ctx context.Context, python, entry, appDir, venvSite string) (pythonInfo, error) {
	var info pythonInfo
	args := []string{"-I", "-c", pythonProbe, entry, appDir}
	if venvSite != "" {
		args = append(args, venvSite)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return info, fmt.Errorf("agentimage: finding the imports of %s with %s: %w\n%s", entry, python, err, tail(stderr.Bytes(), 4096))
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return info, fmt.Errorf("agentimage: the probe of %s: %v", python, err)
	}
	if info.Stdlib == "" || !filepath.IsAbs(info.Stdlib) {
		return info, fmt.Errorf("agentimage: %s reported no standard library", python)
	}
	return info, nil
}

// debianOwner is the Debian package that installed file ("" if none).
func debianOwner(ctx context.Context, file string) string {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-S", file).Output()
	if err != nil {
		return ""
	}
	pkg, _, ok := strings.Cut(strings.TrimSpace(string(out)), ":")
	if !ok || strings.Contains(pkg, ",") {
		return ""
	}
	return strings.TrimSpace(pkg)
}

// debianClosure lists the Python files (under /usr/lib/python3*) of pkgs and of the
// python3-* packages they depend on, recursively. pkgs maps a package to who asked
// for it; a package that is not installed is a *MissingDependencyError.
func debianClosure(ctx context.Context, pkgs map[string][]string) ([]string, error) {
	seen := map[string]bool{"python3": true, "python3-minimal": true}
	var queue []string
	for p := range pkgs {
		queue = append(queue, p)
	}
	sort.Strings(queue)
	var files []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${db:Status-Status}\n${Depends}, ${Pre-Depends}\n", p).Output()
		if err != nil || !bytes.HasPrefix(out, []byte("installed\n")) {
			return nil, &MissingDependencyError{Package: p + " (Debian package, not installed)", RequiredBy: pkgs[p]}
		}
		_, deps, _ := strings.Cut(string(out), "\n")
		for _, d := range strings.Split(deps, ",") {
			alt, _, _ := strings.Cut(d, "|")
			name, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
			name, _, _ = strings.Cut(name, ":")
			if strings.HasPrefix(name, "python3-") && !seen[name] {
				if _, ok := pkgs[name]; !ok {
					pkgs[name] = append(append([]string(nil), pkgs[p]...), p)
				}
				queue = append(queue, name)
			}
		}
		list, err := exec.CommandContext(ctx, "dpkg-query", "-L", p).Output()
		if err != nil {
			return nil, fmt.Errorf("agentimage: dpkg-query -L %s: %w", p, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(list))
		for sc.Scan() {
			f := sc.Text()
			if strings.HasPrefix(f, "/usr/lib/python3") && !strings.Contains(f, "/__pycache__") {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

// sharedLibs returns the shared libraries ldd reports for the given host files, at
// their host paths (the content of what they resolve to).
func sharedLibs(ctx context.Context, paths []string) ([]File, error) {
	seen := map[string]bool{}
	var out []File
	for _, p := range paths {
		res, err := exec.CommandContext(ctx, "ldd", p).Output()
		if err != nil {
			continue // not dynamic, or not for this host: nothing to add
		}
		sc := bufio.NewScanner(bytes.NewReader(res))
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if !strings.HasPrefix(f, "/") || seen[f] {
					continue
				}
				seen[f] = true
				real, err := filepath.EvalSymlinks(f)
				if err != nil {
					return nil, err
				}
				if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
					return nil, fmt.Errorf("agentimage: %s is not a regular file (%v)", real, err)
				}
				out = append(out, File{Path: f, Mode: 0o755, Source: real})
			}
		}
	}
	return out, nil
}

// dedupe keeps the first entry of each path (parents added by WithDirs and the same
// directory from a packed tree, say).
func dedupe(files []File) []File {
	seen := map[string]bool{}
	out := files[:0]
	for _, f := range files {
		if !seen[f.Path] {
			seen[f.Path] = true
			out = append(out, f)
		}
	}
	return out
}
