package preload

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// TestOpenClawSplitPointPinned fails loudly when the installed OpenClaw is not the
// version the preloader was proven against, or when a function the preloader takes
// from OpenClaw's content-hashed dist/ moved: the preloader's own table (SPLIT in
// openclaw-preload.mjs) is read and checked against the package's files, so an
// upgrade cannot make pre-booted runs silently slower or wrong.
func TestOpenClawSplitPointPinned(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version string }
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != OpenClawVersion {
		t.Fatalf("OpenClaw %s is installed; the preloader is proven against %s: prove the split point again (docs/warm-pools-and-runtimes.md) and update both", meta.Version, OpenClawVersion)
	}
	src := string(OpenClaw)
	if !strings.Contains(src, "const PINNED_VERSION = '"+OpenClawVersion+"'") {
		t.Errorf("the preloader's PINNED_VERSION is not OpenClawVersion %s", OpenClawVersion)
	}
	dist := filepath.Join(pkg, "dist")
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatalf("the split point moved: %v", err)
		}
		return string(b)
	}
	if !regexp.MustCompile(`export \{[^}]*\brunMainOrRootHelp\b`).MatchString(read("entry.js")) {
		t.Error("dist/entry.js no longer exports runMainOrRootHelp")
	}
	if !strings.Contains(read("entry.js"), "withCliProcessScope(() => runMainOrRootHelp(process.argv") {
		t.Error("dist/entry.js no longer runs the CLI as withCliProcessScope(() => runMainOrRootHelp(argv)): the preloader's claim path no longer matches it")
	}
	read("cli/run-main.js")
	// The preloader uses the launcher's compile cache directory (a warm
	// openclaw.CompileCache is mounted at its base): the launcher must still derive it
	// the same way, or pre-booted runs would silently miss the cache.
	launcher, err := os.ReadFile(filepath.Join(pkg, "openclaw.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`path\.join\(os\.tmpdir\(\), "node-compile-cache"\)`,
		`installMarker = ` + "`" + `\$\{Math\.trunc\(stat\.mtimeMs\)\}-\$\{stat\.size\}` + "`",
		`path\.join\(\s*baseDirectory,\s*"openclaw",\s*version,\s*sanitizeCompileCachePathSegment\(installMarker\),?\s*\)`,
		`value\.replace\(/\[\^A-Za-z0-9\._-\]\+/g, "_"\)\.replace\(/\^_\+\|_\+\$/g, ""\)`,
	} {
		if !regexp.MustCompile(re).Match(launcher) {
			t.Errorf("openclaw.mjs no longer derives its compile cache directory as the preloader does (%s)", re)
		}
	}
	row := regexp.MustCompile(`(\w+): \['([\w.-]+)', '(\w+)'\]`)
	rows := row.FindAllStringSubmatch(src, -1)
	if len(rows) != 4 {
		t.Fatalf("the preloader's SPLIT table has %d rows, want 4", len(rows))
	}
	for _, r := range rows {
		name, file, exp := r[1], r[2], r[3]
		text := read(file)
		want := name + " as " + exp
		if name == exp {
			want = name
		}
		if !regexp.MustCompile(`export \{[^}]*\b` + regexp.QuoteMeta(want) + `\b`).MatchString(text) {
			t.Errorf("dist/%s does not export %s as %q any more: the split point moved", file, name, exp)
		}
	}
}

// TestOpenClawAheadGraphCapturesNoRunState: the modules the OpenClaw preloader imports
// before the claim (the static graphs of dist/entry.js and dist/cli/run-main.js) must
// not capture anything of the run at import (a top-level constant from the state or
// config path, the environment, HOME, the temporary directory or the working
// directory), except the bindings the preloader re-pins at the claim (pinRuntimePaths:
// STATE_DIR, CONFIG_PATH). A capture would give a run the pre-boot's value: an upgrade
// that adds one fails here, not in a run.
func TestOpenClawAheadGraphCapturesNoRunState(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	dist := filepath.Join(dir, "node_modules", "openclaw", "dist")
	imp := regexp.MustCompile(`(?m)^import\s[^;]*?from\s+"(\.[^"]+)"|^import\s+"(\.[^"]+)"`)
	capture := regexp.MustCompile(`(?m)^(?:const|let|var) [\w$]+ = [^\n]*(?:\bSTATE_DIR\b|\bCONFIG_PATH\b|process\.env|os\.homedir\(\)|os\.tmpdir\(\)|resolveStateDir\(|process\.cwd\(\)|resolveConfigPath)`)
	repinned := map[string]bool{"let STATE_DIR = resolveStateDir(": true, "let CONFIG_PATH = resolveConfigPath": true,
		// Replaced at the claim through runMainOrRootHelp's loadRunCli (checked below).
		"const inheritedRuntimeEnv = { ...process.env": true}
	seen := map[string]bool{}
	var walk func(string)
	walk = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		b, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatalf("the graph moved: %v", err)
		}
		for _, m := range capture.FindAllString(string(b), -1) {
			if !repinned[m] {
				t.Errorf("dist/%s captures run state at import: %q", f, m)
			}
		}
		for _, m := range imp.FindAllStringSubmatch(string(b), -1) {
			walk(filepath.Join(filepath.Dir(f), m[1]+m[2]))
		}
	}
	walk("entry.js")
	walk("cli/run-main.js")
	entry, err := os.ReadFile(filepath.Join(dist, "entry.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`deps.loadRunCli ?? (() => import("./cli/run-main.js"))`, "runtimeRecoveryEnv: inheritedRuntimeEnv,"} {
		if !strings.Contains(string(entry), want) {
			t.Errorf("dist/entry.js no longer has %q: the preloader's replacement of the pre-boot's runtime-recovery environment no longer applies", want)
		}
	}
	if len(seen) < 50 {
		t.Fatalf("only %d modules in the graph: the import scan no longer reads dist/", len(seen))
	}
	t.Logf("%d modules imported ahead, none capturing run state but the re-pinned paths", len(seen))
}
