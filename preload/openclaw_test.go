package preload

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/openclaw"
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
		// Where it records the directory for OpenClaw's worker threads (below).
		`const key = Symbol\.for\("openclaw\.nodeCompileCacheBase"\);\s*const owner = \(globalThis\[key\] \?\?= \{\}\);\s*owner\.baseDirectory \?\?= baseDirectory;`,
	} {
		if !regexp.MustCompile(re).Match(launcher) {
			t.Errorf("openclaw.mjs no longer derives its compile cache directory as the preloader does (%s)", re)
		}
	}
	// OpenClaw's workers take NODE_COMPILE_CACHE from that record; the preloader makes
	// the same record, or every worker of a pre-booted run compiles from source.
	workerEnv := regexp.MustCompile(`Symbol\.for\("openclaw\.nodeCompileCacheBase"\)[\s\S]*NODE_COMPILE_CACHE: directory`)
	if !slices.ContainsFunc(distFiles(t, dist, "node-compile-cache-env-"), func(f string) bool { return workerEnv.MatchString(read(f)) }) {
		t.Error("OpenClaw no longer gives its workers the compile cache recorded under Symbol.for(\"openclaw.nodeCompileCacheBase\"): check how the preloader must share its cache now")
	}
	if !strings.Contains(src, "globalThis[Symbol.for('openclaw.nodeCompileCacheBase')] ??= {}).baseDirectory ??= path.resolve(dir)") {
		t.Error("the preloader no longer records its compile cache directory for OpenClaw's workers")
	}
	row := regexp.MustCompile(`(\w+): \['([\w.-]+)', '(\w+)'\]`)
	rows := row.FindAllStringSubmatch(src, -1)
	if len(rows) != 9 {
		t.Fatalf("the preloader's SPLIT and WARM tables have %d rows, want 4 + 5", len(rows))
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
	repinned := map[string]bool{"let STATE_DIR = resolveStateDir(": true, "let CONFIG_PATH = resolveConfigPath": true,
		// Replaced at the claim through runMainOrRootHelp's loadRunCli (checked below).
		"const inheritedRuntimeEnv = { ...process.env": true}
	seen := staticGraph(t, dist, "entry.js", "cli/run-main.js")
	for _, f := range seen {
		b, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range captureRe.FindAllString(string(b), -1) {
			if !repinned[m] {
				t.Errorf("dist/%s captures run state at import: %q", f, m)
			}
		}
	}
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

// TestOpenClawWarmUpPinned guards what the OpenClaw preloader's warm-up turn (--warm-up)
// relies on beyond its WARM table (whose exports TestOpenClawSplitPointPinned checks):
// that the resets it calls after the turn clear every process-lifetime cache of the
// loaded config (config-guard's module state, the runtime config snapshot), so the run
// loads its own config; and that the one value the turn makes OpenClaw capture at import
// from the pre-boot's environment, the exec tool's DEFAULT_PATH, is used only for exec
// in OpenClaw's own sandbox mode, which every one-shot config sets off. An upgrade that
// adds a cache or a use fails here, before a run could see the warm-up's config.
func TestOpenClawWarmUpPinned(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	dist := filepath.Join(dir, "node_modules", "openclaw", "dist")
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatalf("the warm-up's split point moved: %v", err)
		}
		return string(b)
	}
	body := func(src, fn string) string {
		i := strings.Index(src, "function "+fn+"(")
		if i < 0 {
			t.Fatalf("%s is gone", fn)
		}
		j := strings.Index(src[i:], "\n}\n")
		if j < 0 {
			t.Fatalf("%s has no end", fn)
		}
		return src[i : i+j]
	}
	guard := read("config-guard-BU0O9rns.mjs")
	reset := body(guard, "resetConfigGuardStateForTests")
	lets := regexp.MustCompile(`(?m)^let (\w+) =`).FindAllStringSubmatch(guard, -1)
	if len(lets) == 0 {
		t.Fatal("config-guard has no module state any more: check what caches the loaded config now")
	}
	for _, m := range lets {
		if !strings.Contains(reset, "\t"+m[1]+" = ") {
			t.Errorf("config-guard's %s is not reset by resetConfigGuardStateForTests: a warm-up's value would reach the run", m[1])
		}
	}
	if !strings.Contains(guard, "const testApi = { resetConfigGuardStateForTests };") {
		t.Error("config-guard no longer exports its reset as testApi")
	}
	snap := body(read("runtime-snapshot-DbgWcCyV.mjs"), "resetConfigRuntimeState")
	for _, v := range []string{"runtimeConfigSnapshot", "runtimeConfigSourceSnapshot", "runtimeConfigSnapshotMetadata", "runtimeConfigAppliedHash"} {
		if !strings.Contains(snap, "\t"+v+" = null;") {
			t.Errorf("resetConfigRuntimeState no longer clears %s", v)
		}
	}
	tools := read("bash-tools-B2oth0P7.mjs")
	if n := strings.Count(tools, "DEFAULT_PATH"); n != 2 {
		t.Errorf("the exec tool uses its import-time DEFAULT_PATH %d times, want the import and one use", n-1)
	}
	if !strings.Contains(tools, `const env = params.sandbox && params.host === "sandbox" ? buildSandboxEnv({`+"\n\t\tdefaultPath: DEFAULT_PATH,") {
		t.Error("the exec tool's DEFAULT_PATH is no longer used only in OpenClaw's sandbox mode: the warm-up's PATH could reach a run's exec")
	}
	if !strings.Contains(read("bash-tools.exec-runtime-DO1dSeBv.mjs"), "const DEFAULT_PATH = process.env.PATH ??") {
		t.Error("the exec runtime's DEFAULT_PATH capture moved: check it again")
	}
	cfg, err := openclaw.NewConfig(openclaw.WithModels(openclaw.Model{ID: "m", ContextWindow: 32000, MaxTokens: 1024}))
	if err != nil {
		t.Fatal(err)
	}
	if mode, _ := cfg.Lookup("agents.defaults.sandbox.mode"); mode != "off" {
		t.Errorf("one-shot configs set OpenClaw's sandbox mode %v, not off: its exec would use the warm-up's PATH", mode)
	}
	// The warm-up retires the session disk-budget reader's worker through OpenClaw's reset
	// of that pool's singleton (its run gets the standby, whenever it is claimed).
	if !strings.Contains(read("global-singleton-Dc_stLtU.mjs"), `const GLOBAL_SINGLETON_RESETS_KEY = Symbol.for("openclaw.globalSingletonLifecycleResets");`) {
		t.Error("OpenClaw's singleton reset registry moved: the warm-up cannot retire the disk-budget reader's worker")
	}
	if !strings.Contains(read("disk-budget-CH7vIk-L.mjs"), `resolveGlobalSingleton(Symbol.for("openclaw.sessionDiskBudgetWorkers"), () => ({`) ||
		!strings.Contains(read("disk-budget-CH7vIk-L.mjs"), `}), () => drainSessionDiskBudgetWorkers());`) {
		t.Error("the session disk-budget workers' singleton no longer resets by draining its pool: check how the warm-up must retire its worker")
	}
	if !strings.Contains(string(OpenClaw), "sandbox: { mode: 'off' }") {
		t.Error("the warm-up's config no longer sets OpenClaw's sandbox mode off")
	}
}

// distFiles lists dist/'s top-level files whose names start with prefix (a module's
// content hash is not pinned where its name is enough).
func distFiles(t *testing.T, dist, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}
