package preload

import (
	"bufio"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// preloadedModules runs the OpenClaw preloader on the host with args (as the bridge
// runs it: its control channel on a socket pair, nothing on stdout) until it says
// ready, and returns the dist/ files (relative to dist) its main thread loaded.
func preloadedModules(t *testing.T, pkg string, args ...string) []string {
	t.Helper()
	node := os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	dir := t.TempDir()
	script, hook, log := filepath.Join(dir, OpenClawName), filepath.Join(dir, "load-log.cjs"), filepath.Join(dir, "modules.log")
	for f, b := range map[string][]byte{script: OpenClaw, hook: []byte(loadLog)} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-child")
	defer ours.Close()
	cmd := exec.Command(node, append([]string{"--require", hook, script}, append(args, pkg)...)...)
	// A private HOME and TMPDIR: the warm-up's throwaway directory goes there.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LOAD_LOG=" + log, "AGENTSANDBOX_PRELOAD_FD=3"}
	cmd.ExtraFiles = []*os.File{theirs}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(ours).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if !strings.Contains(line, `"ready":true`) {
			t.Fatalf("the preloader did not say ready: %q\n%s", line, stderr.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("the preloader was not ready in 5 minutes\n%s", stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("the preloader wrote to stdout before the claim: %q", stdout.String())
	}
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

// warmUpCaptures is every top-level value in a module the warm-up loads that is
// computed from the pre-boot's environment, state or config, with why it cannot give a
// one-shot run the warm-up's value. A new one fails TestOpenClawWarmUpGraphCaptures.
var warmUpCaptures = map[string]string{
	// Re-pinned at the claim (SPLIT: pinRuntimePaths, pinConfigDir; the entry's
	// runtime-recovery environment through loadRunCli).
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
	"bundled-dir-BGJkK8G5.mjs DISABLED_BUNDLED_PLUGINS_DIR":          "an empty directory under the sandbox's temporary directory, the same unless a run sets TMPDIR",
	"builtin-openclaw-q1hiFm14.mjs EMBEDDED_ABORT_SETTLE_TIMEOUT_MS": "a test tuning variable: a run that sets it is not honoured (documented)",
	"theme-DzaUZY4q.mjs hasForceColor":                               "terminal colours; a one-shot prints JSON",
	"theme-DzaUZY4q.mjs baseChalk":                                   "terminal colours; a one-shot prints JSON",
	"chrome-mcp-options-nWvKXmxV.mjs minNodeVersion":                 "vendored yargs' Node version check",
	"chrome-mcp-options-nWvKXmxV.mjs env":                            "vendored yargs' locale detection",
	"host-env-security-D7wdDMke.mjs HOST_ENV_SECURITY_POLICY":        "a static policy bundled in the module",
}

// TestOpenClawWarmUpGraphCaptures runs the preloader with --warm-up on the host and
// scans every OpenClaw module its main thread loaded before it said ready (some 2,900,
// against the ~100 TestOpenClawAheadGraphCapturesNoRunState reads statically): a
// top-level value computed at import from the environment, the home, temporary or
// working directory, the state or config path, or a no-argument resolver (whose
// default is process.env) holds the warm-up's value in the run, so each must be
// re-pinned at the claim or judged harmless in warmUpCaptures.
func TestOpenClawWarmUpGraphCaptures(t *testing.T) {
	dir := os.Getenv("OPENCLAW_DIR")
	testenv.Need(t, "openclaw", dir != "", "OPENCLAW_DIR is not set (scripts/install-openclaw.sh)")
	pkg := filepath.Join(dir, "node_modules", "openclaw")
	mods := preloadedModules(t, pkg, "--warm-up")
	if len(mods) < 1000 {
		t.Fatalf("the warm-up loaded %d of OpenClaw's modules: the load log no longer sees them", len(mods))
	}
	capture := regexp.MustCompile(`(?m)^(?:const|let|var) ([\w$]+) = [^\n]*(?:\bSTATE_DIR\b|\bCONFIG_PATH\b|process\.env|os\.homedir\(\)|os\.tmpdir\(\)|resolveStateDir\(|process\.cwd\(\)|resolveConfigPath)`)
	resolver := regexp.MustCompile(`(?m)^(?:const|let|var) ([\w$]+) = (?:resolve|load|read|detect)\w*\(\);?$`)
	arrow := regexp.MustCompile(`^(?:const|let|var) [\w$]+ = (?:async )?(?:\([^)]*\)|[\w$]+) =>`) // a function, run later
	found := map[string]bool{}
	for _, f := range mods {
		b, err := os.ReadFile(filepath.Join(pkg, "dist", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range []*regexp.Regexp{capture, resolver} {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				key := f + " " + m[1]
				if arrow.MatchString(m[0]) || strings.HasPrefix(m[0], "const "+m[1]+" = resolveZstdCodec(") {
					continue // a function run later; a codec, not a path
				}
				found[key] = true
				if _, ok := warmUpCaptures[key]; !ok {
					t.Errorf("dist/%s captures the pre-boot's state at import: %q: re-pin it at the claim or judge it in warmUpCaptures", f, m[0])
				}
			}
		}
	}
	for key := range warmUpCaptures {
		if !found[key] {
			t.Errorf("%s is judged in warmUpCaptures but the warm-up no longer loads it: prune the table", key)
		}
	}
	t.Logf("%d modules loaded before ready, %d captures, each judged", len(mods), len(found))
}
