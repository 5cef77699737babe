package preload

import (
	"bufio"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// loadLog is a --require hook that appends the URL of every module the main thread
// loads to LOAD_LOG.
const loadLog = `const m = require('node:module'), fs = require('node:fs'), wt = require('node:worker_threads');
const log = process.env.LOAD_LOG; // the preloader replaces the environment
if (wt.isMainThread) m.registerHooks({ load(url, ctx, next) { fs.appendFileSync(log, url + '\n'); return next(url, ctx); } });
`

// hostPreload is the OpenClaw preloader run on the host as the bridge runs it: its
// control channel on a socket pair, its stdout and stderr captured.
type hostPreload struct {
	t              *testing.T
	dir            string
	cmd            *exec.Cmd
	ctl            *os.File
	lines          *bufio.Reader
	stdout, stderr strings.Builder
}

// startHostPreload starts node --require HOOK openclaw-preload.mjs ARGS PKG with a
// private HOME and TMPDIR (the warm-up's throwaway directory goes there) plus env.
func startHostPreload(t *testing.T, pkg, hook string, env []string, args ...string) *hostPreload {
	t.Helper()
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	h := &hostPreload{t: t, dir: t.TempDir()}
	script, hookFile := filepath.Join(h.dir, OpenClawName), filepath.Join(h.dir, "hook.cjs")
	for f, b := range map[string][]byte{script: OpenClaw, hookFile: []byte(hook)} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "control-child")
	h.ctl = os.NewFile(uintptr(fds[0]), "control")
	h.lines = bufio.NewReader(h.ctl)
	h.cmd = exec.Command(node, append([]string{"--require", hookFile, script}, append(args, pkg)...)...)
	h.cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + h.dir, "TMPDIR=" + h.dir, "AGENTSANDBOX_PRELOAD_FD=3"}, env...)
	h.cmd.ExtraFiles = []*os.File{theirs}
	h.cmd.Stdout, h.cmd.Stderr = &h.stdout, &h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
		h.ctl.Close()
	})
	return h
}

// line reads the preloader's next control line, waiting at most d.
func (h *hostPreload) line(d time.Duration) string {
	h.t.Helper()
	got := make(chan string, 1)
	go func() {
		l, _ := h.lines.ReadString('\n')
		got <- l
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(d):
		_ = h.cmd.Process.Kill()
		h.t.Fatalf("no line from the preloader in %v\n%s", d, h.stderr.String())
		return ""
	}
}

// waitReady waits for the ready line (a warm-up turn takes some 10-30 s).
func (h *hostPreload) waitReady() {
	h.t.Helper()
	if l := h.line(5 * time.Minute); !strings.Contains(l, `"ready":true`) {
		h.t.Fatalf("the preloader did not say ready: %q\n%s", l, h.stderr.String())
	}
	if h.stdout.Len() > 0 {
		h.t.Errorf("the preloader wrote to stdout before the claim: %q", h.stdout.String())
	}
}

// preloadedModules runs the OpenClaw preloader with args until it says ready and
// returns the dist/ files (relative to dist) its main thread loaded.
func preloadedModules(t *testing.T, pkg string, args ...string) []string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "modules.log")
	h := startHostPreload(t, pkg, loadLog, []string{"LOAD_LOG=" + log}, args...)
	h.waitReady()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	prefix := (&url.URL{Scheme: "file", Path: filepath.Join(pkg, "dist") + "/"}).String()
	var mods []string
	seen := map[string]bool{}
	for _, u := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(u, prefix); ok && !seen[rel] {
			seen[rel] = true
			mods = append(mods, rel)
		}
	}
	return mods
}

// warmUpCaptures is every top-level value, in a module the preloader loads before the
// claim (its main thread's, after a warm-up, and its standby workers'), that is
// computed from the pre-boot's environment, state or config, with why it cannot give
// a one-shot run the pre-boot's value. A new one fails TestOpenClawWarmUpGraphCaptures.
var warmUpCaptures = map[string]string{
	// Re-pinned at the claim, in the main thread and in each standby worker (SPLIT:
	// pinRuntimePaths, pinConfigDir; the entry's runtime-recovery environment through
	// loadRunCli).
	"paths-DehQwyE0.mjs STATE_DIR":   "re-pinned by pinRuntimePaths",
	"paths-DehQwyE0.mjs CONFIG_PATH": "re-pinned by pinRuntimePaths",
	"paths-DehQwyE0.mjs isNixMode":   "re-pinned by pinRuntimePaths",
	"utils-aKqR_F_U.mjs CONFIG_DIR":  "re-pinned by pinConfigDir",
	"entry.js inheritedRuntimeEnv":   "replaced through runMainOrRootHelp's loadRunCli",
	// Used only in OpenClaw's own sandbox mode, which every one-shot config turns off
	// (TestOpenClawWarmUpPinned).
	"bash-tools.exec-runtime-DO1dSeBv.mjs DEFAULT_PATH":          "OpenClaw sandbox mode only",
	"constants-D1dHTp_E.mjs DEFAULT_SANDBOX_WORKSPACE_ROOT":      "OpenClaw sandbox mode only",
	"constants-D1dHTp_E.mjs SANDBOX_STATE_DIR":                   "OpenClaw sandbox mode only",
	"workspace-default-hMJcajDi.mjs DEFAULT_AGENT_WORKSPACE_DIR": "the fallback for a config naming no workspace; openclaw.Config always names one",
	// The same value for the pre-boot and a run, or not about the run.
	"bundled-dir-BGJkK8G5.mjs DISABLED_BUNDLED_PLUGINS_DIR":            "an empty directory under the sandbox's temporary directory, the same unless a run sets TMPDIR",
	"state/openclaw-state-read.worker.js DISABLED_BUNDLED_PLUGINS_DIR": "the state-read worker's copy of the same",
	"builtin-openclaw-q1hiFm14.mjs EMBEDDED_ABORT_SETTLE_TIMEOUT_MS":   "a test tuning variable: a run that sets it is not honoured (documented)",
	"theme-DzaUZY4q.mjs hasForceColor":                                 "terminal colours; a one-shot prints JSON",
	"theme-DzaUZY4q.mjs baseChalk":                                     "terminal colours; a one-shot prints JSON",
	"host-env-security-D7wdDMke.mjs HOST_ENV_SECURITY_POLICY":          "a static policy bundled in the module",
}

// standbyGraph returns the dist/ files a standby worker of the preloader's STANDBY
// table imports before the claim: the static import graphs of its later modules and of
// its entry (for a deferred entry, of the entry's own imports only).
func standbyGraph(t *testing.T, dist string) []string {
	t.Helper()
	src := string(OpenClaw)
	i := strings.Index(src, "const STANDBY = {")
	if i < 0 {
		t.Fatal("the preloader has no STANDBY table")
	}
	table := src[i : i+strings.Index(src[i:], "\n};")]
	rows := regexp.MustCompile(`'([\w./-]+)': \[(\d), \[([^\]]*)\], (true|false), '(\w+)', (?:true|false)\]`).FindAllStringSubmatch(table, -1)
	if len(rows) != 5 {
		t.Fatalf("the STANDBY table has %d rows, want 5", len(rows))
	}
	var roots []string
	for _, r := range rows {
		for _, later := range regexp.MustCompile(`'([\w./-]+)'`).FindAllStringSubmatch(r[3], -1) {
			roots = append(roots, later[1])
		}
		if r[4] == "false" {
			roots = append(roots, r[1])
			continue
		}
		b, err := os.ReadFile(filepath.Join(dist, r[1]))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range importRe.FindAllStringSubmatch(string(b), -1) {
			roots = append(roots, filepath.Join(filepath.Dir(r[1]), m[1]+m[2]))
		}
	}
	// And the re-pinning modules each standby imports.
	return staticGraph(t, dist, append(roots, "paths-bFNjVB0r.mjs", "utils-CgtqH0G3.mjs")...)
}

// importRe matches a static import of a module of dist/ by relative path.
var importRe = regexp.MustCompile(`(?m)^import\s[^;]*?from\s+"(\.[^"]+)"|^import\s+"(\.[^"]+)"`)

// captureRe matches a top-level value computed at import from the environment, the
// home, temporary or working directory, or the state or config path.
var captureRe = regexp.MustCompile(`(?m)^(?:const|let|var) ([\w$]+) = [^\n]*(?:\bSTATE_DIR\b|\bCONFIG_PATH\b|process\.env|os\.homedir\(\)|os\.tmpdir\(\)|resolveStateDir\(|process\.cwd\(\)|resolveConfigPath)`)

// staticGraph returns the dist/ files (relative to dist, sorted) that roots reach by
// static relative imports, roots included.
func staticGraph(t *testing.T, dist string, roots ...string) []string {
	t.Helper()
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
		for _, m := range importRe.FindAllStringSubmatch(string(b), -1) {
			walk(filepath.Join(filepath.Dir(f), m[1]+m[2]))
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return slices.Sorted(maps.Keys(seen))
}

// TestOpenClawWarmUpGraphCaptures runs the preloader with --warm-up-follow-up (the
// --warm-up turn and a follow-up on its state) on the host and
// scans every OpenClaw module its main thread loaded before it said ready (some 2,900,
// against the ~100 TestOpenClawAheadGraphCapturesNoRunState reads statically), and
// the static graphs its standby workers import (~740): a top-level value computed at
// import from the environment, the home, temporary or working directory, the state or
// config path, or a no-argument resolver (whose default is process.env) holds the
// pre-boot's value in the run, so each must be re-pinned at the claim or judged
// harmless in warmUpCaptures.
func TestOpenClawWarmUpGraphCaptures(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	// --warm-up-follow-up runs the --warm-up turn and then a second one on its state:
	// what it loads is a superset of --warm-up's, so one scan covers both.
	mods := preloadedModules(t, pkg, "--warm-up-follow-up")
	if len(mods) < 1000 {
		t.Fatalf("the warm-up loaded %d of OpenClaw's modules: the load log no longer sees them", len(mods))
	}
	workers := standbyGraph(t, filepath.Join(pkg, "dist"))
	if len(workers) < 100 {
		t.Fatalf("the standby workers' graphs hold %d modules: the import scan no longer reads dist/", len(workers))
	}
	resolver := regexp.MustCompile(`(?m)^(?:const|let|var) ([\w$]+) = (?:resolve|load|read|detect)\w*\(\);?$`)
	arrow := regexp.MustCompile(`^(?:const|let|var) [\w$]+ = (?:async )?(?:\([^)]*\)|[\w$]+) =>`) // a function, run later
	found := map[string]bool{}
	for _, f := range slices.Compact(slices.Sorted(slices.Values(append(mods, workers...)))) {
		b, err := os.ReadFile(filepath.Join(pkg, "dist", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range []*regexp.Regexp{captureRe, resolver} {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				if arrow.MatchString(m[0]) || strings.HasPrefix(m[0], "const "+m[1]+" = resolveZstdCodec(") {
					continue // a function run later; a codec, not a path
				}
				key := f + " " + m[1]
				found[key] = true
				if _, ok := warmUpCaptures[key]; !ok {
					t.Errorf("dist/%s captures the pre-boot's state at import: %q: re-pin it at the claim or judge it in warmUpCaptures", f, m[0])
				}
			}
		}
	}
	for key := range warmUpCaptures {
		if !found[key] {
			t.Errorf("%s is judged in warmUpCaptures but nothing loaded before the claim holds it: prune the table", key)
		}
	}
	t.Logf("%d modules loaded by the main thread before ready, %d by standby workers; %d captures, each judged", len(mods), len(workers), len(found))
}
