package agentimage

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

const debianPython = "/usr/bin/python3"

// TestPythonClosure: the builder finds a Debian package's module the script imports
// (python3-yaml, with its C library from ldd), packs the standard library without its
// tests, and refuses a script importing a module that is nowhere.
func TestPythonClosure(t *testing.T) {
	_, err := os.Stat("/usr/lib/python3/dist-packages/yaml/__init__.py")
	testenv.Need(t, "python", err == nil, "Debian's python3 and python3-yaml are not installed (scripts/install-python.sh)")
	app := t.TempDir()
	writeTree(t, app, map[string]string{
		"main.py":     "import json\nimport yaml\nfrom helper import greet\nprint(yaml.safe_dump({'greeting': greet()}))\n",
		"helper.py":   "def greet():\n    return 'hello'\n",
		".env":        "SECRET=canary",
		"notes/a.txt": "x",
	})
	img, err := Python(context.Background(), PythonApp{Name: "example.com/py", Dir: app, Entry: "main.py", Python: debianPython})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range img.Files {
		if have[f.Path] {
			t.Errorf("%s packed twice", f.Path)
		}
		have[f.Path] = true
	}
	for _, p := range []string{"/usr/bin/python3", "/app/main.py", "/app/helper.py", "/app/notes/a.txt",
		"/usr/lib/python3.11/json/__init__.py", "/usr/lib/python3/dist-packages/yaml/__init__.py"} {
		if !have[p] {
			t.Errorf("image lacks %s", p)
		}
	}
	var libyaml, tests bool
	for p := range have {
		libyaml = libyaml || strings.Contains(p, "libyaml")
		tests = tests || strings.HasPrefix(p, "/usr/lib/python3.11/test/")
		if strings.HasSuffix(p, ".env") || strings.Contains(p, "__pycache__") {
			t.Errorf("image has %s", p)
		}
	}
	if !libyaml {
		t.Error("the C library of yaml's extension is not packed")
	}
	if tests {
		t.Error("the standard library's tests are packed")
	}
	if _, _, err := img.Archive(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(app, "main.py"), []byte("import json\nimport no_such_module_anywhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Python(context.Background(), PythonApp{Name: "example.com/py", Dir: app, Entry: "main.py", Python: debianPython})
	var me *MissingDependencyError
	if !errors.As(err, &me) || !errors.Is(err, errdefs.ErrInvalidSpec) || me.Package != "no_such_module_anywhere" {
		t.Fatalf("missing module: %v", err)
	}
	if err := os.WriteFile(filepath.Join(app, "main.py"), []byte("import json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Python(context.Background(), PythonApp{Name: "example.com/py", Dir: app, Entry: "main.py", Python: debianPython, Packages: []string{"python3-no-such-package"}})
	if !errors.As(err, &me) || !strings.Contains(me.Package, "python3-no-such-package") {
		t.Errorf("an uninstalled Debian package: %v", err)
	}
}

// TestPythonVenv: a venv's site-packages is packed whole and put on PYTHONPATH; the
// modules the script imports from it are found there, not reported missing.
func TestPythonVenv(t *testing.T) {
	_, err := os.Stat(debianPython)
	testenv.Need(t, "python", err == nil, "Debian's python3 is not installed (scripts/install-python.sh)")
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(debianPython, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	site, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if len(site) != 1 {
		t.Fatalf("site-packages: %v", site)
	}
	writeTree(t, site[0], map[string]string{"vendored/__init__.py": "VALUE = 42\n", "vendored/data.txt": "d"})
	app := t.TempDir()
	writeTree(t, app, map[string]string{"main.py": "import vendored\nprint(vendored.VALUE)\n"})
	img, err := Python(context.Background(), PythonApp{Name: "example.com/pyvenv", Dir: app, Entry: "main.py", Python: debianPython, Venv: venv})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range img.Files {
		have[f.Path] = true
	}
	if !have[VenvSitePackages+"/vendored/__init__.py"] || !have[VenvSitePackages+"/vendored/data.txt"] {
		t.Errorf("the venv's package is not packed")
	}
	if !slices.Contains(img.Env, "PYTHONPATH="+VenvSitePackages) {
		t.Errorf("env %v", img.Env)
	}
}

// TestPythonOptionalImports: a module imported under `try: ... except ImportError:`
// (or ModuleNotFoundError, or a bare except) is optional: missing, it is no error (the
// script handles its absence); found, it is packed. PythonApp.Optional marks one
// optional whatever the script does. A missing module imported unguarded is still an
// error.
func TestPythonOptionalImports(t *testing.T) {
	_, err := os.Stat("/usr/lib/python3/dist-packages/yaml/__init__.py")
	testenv.Need(t, "python", err == nil, "Debian's python3 and python3-yaml are not installed (scripts/install-python.sh)")
	app := t.TempDir()
	writeTree(t, app, map[string]string{"main.py": `import json
try:
    import openai_not_installed_here
except ImportError:
    openai_not_installed_here = None
try:
    from anthropic_not_installed_here import Anthropic
except (ModuleNotFoundError, OSError):
    Anthropic = None
try:
    import yaml
except ImportError:
    yaml = None
import dynamically_optional_module
print(json.dumps({"openai": openai_not_installed_here is not None}))
`})
	build := func(optional ...string) (Image, error) {
		return Python(context.Background(), PythonApp{Name: "example.com/pyopt", Dir: app, Entry: "main.py", Python: debianPython, Optional: optional})
	}
	_, err = build()
	var me *MissingDependencyError
	if !errors.As(err, &me) || me.Package != "dynamically_optional_module" {
		t.Fatalf("an unguarded missing import: %v, want it named", err)
	}
	img, err := build("dynamically_optional_module")
	if err != nil {
		t.Fatalf("guarded imports and a module marked optional: %v", err)
	}
	have := false
	for _, f := range img.Files {
		have = have || f.Path == "/usr/lib/python3/dist-packages/yaml/__init__.py"
	}
	if !have {
		t.Error("an optional module that is installed is not packed")
	}
	if _, err := build("bad name!"); !errors.Is(err, errdefs.ErrInvalidSpec) {
		t.Errorf("a bad optional name: %v", err)
	}
}
