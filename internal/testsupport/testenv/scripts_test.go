package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// scriptsDir is the repository's scripts directory, from this package's directory.
const scriptsDir = "../../../scripts"

// aptCall matches a command that installs, removes or updates Debian packages; dpkg's
// queries (-s, -l, -L, -S, dpkg-query) do not match.
var aptCall = regexp.MustCompile(`(^|[^\w.-])(apt-get|aptitude)([^\w.-]|$)|(^|[^\w.-])apt\s+(install|reinstall|update|upgrade|full-upgrade|dist-upgrade|remove|purge|autoremove)\b|(^|[^\w.-])dpkg(\s+--?[\w-]+(=\S+)?)*\s+(-i|--install|--unpack|--configure|-r|--remove|-P|--purge)\b`)

// shellComment is a comment: a # at the start of a line or after a blank.
var shellComment = regexp.MustCompile(`(^|\s)#.*$`)

// TestScriptsInstallOnlyThroughPkgHelper: every package install in the scripts goes
// through scripts/lib/pkg.sh, which serialises apt-get and updates the lists once. Two
// scripts that called apt-get themselves, side by side, made `make test` fail at once on
// a new machine (dpkg's lock); on a machine with the packages no apt-get runs, so only a
// check of the text catches it.
func TestScriptsInstallOnlyThroughPkgHelper(t *testing.T) {
	files := []string{"../../../Makefile", "../../../.ci/run"}
	err := filepath.WalkDir(scriptsDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(scriptsDir, "lib", "pkg.sh")
	checked := 0
	for _, f := range files {
		if f == helper {
			continue
		}
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) && !strings.HasPrefix(f, scriptsDir) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			code := shellComment.ReplaceAllString(line, "")
			if aptCall.MatchString(code) {
				t.Errorf("%s:%d calls the package manager outside scripts/lib/pkg.sh (use pkg_install): %s",
					strings.TrimPrefix(f, "../../../"), i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: the scripts directory moved?", checked)
	}
	if _, err := os.Stat(helper); err != nil {
		t.Fatal(err)
	}
}

// TestAptCallPattern: the scan above finds the ways a script installs packages and lets
// comments, queries and messages that name a script through.
func TestAptCallPattern(t *testing.T) {
	for _, s := range []string{
		"apt-get install -y foo",
		"  DEBIAN_FRONTEND=noninteractive apt-get -qq update",
		"x=$(apt-get install foo)",
		"apt install foo",
		"aptitude install foo",
		"dpkg -i foo.deb",
		"dpkg --force-confold --configure -a",
		"sudo dpkg --purge foo",
		`log "npm is missing (apt-get install npm)"`,
	} {
		if !aptCall.MatchString(shellComment.ReplaceAllString(s, "")) {
			t.Errorf("not found: %s", s)
		}
	}
	for _, s := range []string{
		"# apt-get install foo (a comment)",
		"dpkg -s foo >/dev/null",
		"dpkg-query -W -f='${Status}' foo",
		"pkg_install docker.io containerd",
		"bash scripts/install-apt-getter.sh",
		"dpkg --print-architecture",
		`echo ok # then apt-get install x`,
	} {
		if aptCall.MatchString(shellComment.ReplaceAllString(s, "")) {
			t.Errorf("found, but is no install: %s", s)
		}
	}
}

// fakeDebian is a root for scripts/lib/pkg.sh (SANDBOX_PKG_ROOT) with an apt-get, dpkg
// and id of its own first on PATH: apt-get logs each call and what policy-rc.d said
// while it ran, installs by creating installed/<package>, and updates by creating a
// list; FAKE_STALE makes installs fail until an update, FAKE_BROKEN always.
type fakeDebian struct {
	root string
	env  []string
}

const fakeAptGet = `#!/bin/bash
r=$FAKE_ROOT
echo "start $$ $*" >>"$r/log"
if [ -e "$r/usr/sbin/policy-rc.d" ]; then echo "policy $$ $(tail -n 1 "$r/usr/sbin/policy-rc.d")" >>"$r/log"; fi
sleep "${FAKE_SLEEP:-0}"
cmd= pkgs=() skip=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case $a in
  -o) skip=1 ;;
  -*) ;;
  update | install) cmd=$a ;;
  *) pkgs+=("$a") ;;
  esac
done
case $cmd in
update)
  mkdir -p "$r/var/lib/apt/lists" && touch "$r/var/lib/apt/lists/deb_main_Packages.lz4" "$r/updated" ;;
install)
  if [ -n "${FAKE_BROKEN:-}" ] || { [ -n "${FAKE_STALE:-}" ] && [ ! -e "$r/updated" ]; }; then
    echo "E: Failed to fetch http://deb.example/pool/${pkgs[0]}.deb 404 Not Found"
    echo "end $$ failed" >>"$r/log"
    exit 100
  fi
  for p in "${pkgs[@]}"; do touch "$r/installed/$p"; done ;;
esac
echo "end $$" >>"$r/log"
`

const fakeDpkg = `#!/bin/bash
r=$FAKE_ROOT
case "$*" in
"-s "*) [ -e "$r/installed/$2" ] ;;
*"--configure -a"*) echo "configure $$ $*" >>"$r/log"; rm -f "$r/var/lib/dpkg/updates/"* ;;
*) echo "unexpected dpkg $*" >>"$r/log"; exit 2 ;;
esac
`

func newFakeDebian(t *testing.T, uid string, installed ...string) *fakeDebian {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "installed", "var/lib/apt/lists", "var/lib/dpkg/updates", "usr/sbin", "run/lock"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{
		"bin/apt-get": fakeAptGet,
		"bin/dpkg":    fakeDpkg,
		"bin/id":      "#!/bin/sh\necho " + uid + "\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range installed {
		if err := os.WriteFile(filepath.Join(root, "installed", p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The lists are there, as on most machines; tests that want none remove them.
	if err := os.WriteFile(filepath.Join(root, "var/lib/apt/lists/deb_main_Packages.lz4"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + filepath.Join(root, "bin") + ":" + os.Getenv("PATH"), "SANDBOX_PKG_ROOT=" + root, "FAKE_ROOT=" + root}
	for _, kv := range os.Environ() {
		// The run this test runs in (scripts/test.sh) must not leak into the fake's.
		if strings.HasPrefix(kv, "SANDBOX_PKG_") || strings.HasPrefix(kv, "SANDBOX_FRESH") || strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "FAKE_") {
			continue
		}
		env = append(env, kv)
	}
	return &fakeDebian{root: root, env: env}
}

// run runs script in bash after sourcing the helper; extra is added to the environment.
func (f *fakeDebian) run(t *testing.T, script string, extra ...string) (string, int) {
	t.Helper()
	helper, err := filepath.Abs(filepath.Join(scriptsDir, "lib", "pkg.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "set -euo pipefail; . "+helper+"; "+script)
	cmd.Env = append(append([]string{}, f.env...), extra...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// calls returns the apt-get calls logged, as their argument lines ("update", "install ...").
func (f *fakeDebian) calls(t *testing.T) []string {
	t.Helper()
	var calls []string
	for _, l := range f.log(t) {
		if rest, ok := strings.CutPrefix(l, "start "); ok {
			_, args, _ := strings.Cut(rest, " ")
			calls = append(calls, args)
		}
	}
	return calls
}

func (f *fakeDebian) log(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, "log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	s := bufio.NewScanner(strings.NewReader(string(b)))
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

func count(calls []string, verb string) int {
	n := 0
	for _, c := range calls {
		if strings.Contains(" "+c+" ", " "+verb+" ") {
			n++
		}
	}
	return n
}

func (f *fakeDebian) installed(p string) bool {
	_, err := os.Stat(filepath.Join(f.root, "installed", p))
	return err == nil
}

// TestPkgInstallsSerialised: installs started side by side (as scripts/test.sh starts
// the Kubernetes build beside setup.sh) run one after the other, each apt-get also
// waiting for dpkg's own lock; both packages end up installed.
func TestPkgInstallsSerialised(t *testing.T) {
	f := newFakeDebian(t, "0")
	var wg sync.WaitGroup
	outs := make([]string, 4)
	codes := make([]int, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], codes[i] = f.run(t, "pkg_install pkg"+string(rune('a'+i)), "FAKE_SLEEP=0.3")
		}()
	}
	wg.Wait()
	for i := range outs {
		if codes[i] != 0 {
			t.Fatalf("install %d: exit %d\n%s", i, codes[i], outs[i])
		}
		if p := "pkg" + string(rune('a'+i)); !f.installed(p) {
			t.Errorf("%s not installed", p)
		}
	}
	open := ""
	for _, l := range f.log(t) {
		fields := strings.Fields(l)
		switch fields[0] {
		case "start":
			if open != "" {
				t.Fatalf("apt-get %s started while %s ran:\n%s", fields[1], open, strings.Join(f.log(t), "\n"))
			}
			open = fields[1]
			if !strings.Contains(l, "DPkg::Lock::Timeout=") {
				t.Errorf("apt-get does not wait for dpkg's lock: %s", l)
			}
		case "end":
			open = ""
		}
	}
	if n := len(f.calls(t)); n != 4 {
		t.Errorf("%d apt-get calls, want 4 (one install each, no update: the lists are there): %q", n, f.calls(t))
	}
}

// TestPkgUpdatesListsOncePerRunWhenNeeded: with no lists, the first install of a run
// updates them, and no other install of that run (in child scripts too) does; a later
// run with lists does not update; an install that fails on stale lists is retried once
// after an update; an install that still fails is not updated for again in that run.
func TestPkgUpdatesListsOncePerRunWhenNeeded(t *testing.T) {
	f := newFakeDebian(t, "0")
	if err := os.Remove(filepath.Join(f.root, "var/lib/apt/lists/deb_main_Packages.lz4")); err != nil {
		t.Fatal(err)
	}
	helper, _ := filepath.Abs(filepath.Join(scriptsDir, "lib", "pkg.sh"))
	out, code := f.run(t, "pkg_install a; bash -c '. "+helper+"; pkg_install b'; pkg_install c")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	calls := f.calls(t)
	if count(calls, "update") != 1 || count(calls, "install") != 3 || !strings.Contains(calls[0], "update") {
		t.Fatalf("want one update first, then three installs: %q", calls)
	}

	// A new run: the lists are there, nothing to update.
	os.Remove(filepath.Join(f.root, "log"))
	if out, code := f.run(t, "pkg_install d"); code != 0 || count(f.calls(t), "update") != 0 {
		t.Fatalf("exit %d, calls %q (want no update)\n%s", code, f.calls(t), out)
	}

	// Stale lists: the install fails, the lists are updated, the install is retried.
	os.Remove(filepath.Join(f.root, "log"))
	os.Remove(filepath.Join(f.root, "updated"))
	out, code = f.run(t, "pkg_install e", "FAKE_STALE=1")
	if calls := f.calls(t); code != 0 || len(calls) != 3 || count(calls[:1], "install") != 1 || count(calls[1:2], "update") != 1 || count(calls[2:], "install") != 1 || !f.installed("e") {
		t.Fatalf("exit %d, calls %q: want install, update, install\n%s", code, calls, out)
	}

	// A broken install fails the call, with apt-get's words; one update per run only.
	os.Remove(filepath.Join(f.root, "log"))
	out, code = f.run(t, "pkg_install f || echo first failed; pkg_install g", "FAKE_BROKEN=1")
	if code == 0 || !strings.Contains(out, "first failed") || !strings.Contains(out, "404 Not Found") {
		t.Fatalf("exit %d: want both installs to fail, with apt-get's message\n%s", code, out)
	}
	if n := count(f.calls(t), "update"); n != 1 {
		t.Errorf("%d updates in one run, want 1: %q", n, f.calls(t))
	}
	// The optional form reports and goes on.
	if out, code := f.run(t, "pkg_install_optional h; echo went on", "FAKE_BROKEN=1"); code != 0 || !strings.Contains(out, "went on") || !strings.Contains(out, "could not install h") {
		t.Errorf("optional: exit %d\n%s", code, out)
	}
}

// TestPkgNothingToDo: installed packages need no apt-get and no root; a missing one
// without root fails, naming it, without calling apt-get.
func TestPkgNothingToDo(t *testing.T) {
	f := newFakeDebian(t, "1000", "a", "b")
	if out, code := f.run(t, "pkg_install a b; pkg_missing a b c"); code != 0 || strings.TrimSpace(out) != "c" {
		t.Fatalf("exit %d, %q: want success and c missing", code, out)
	}
	out, code := f.run(t, "pkg_install a c")
	if code == 0 || !strings.Contains(out, "missing Debian packages c and not root") {
		t.Fatalf("exit %d, %q: want a failure naming c", code, out)
	}
	if calls := f.calls(t); len(calls) != 0 {
		t.Errorf("apt-get ran: %q", calls)
	}
}

// TestPkgNoServiceStarts: a policy-rc.d that forbids service starts is in place while
// apt-get runs and gone afterwards; one that was there before (the machine's) is left
// as it was; one a killed run of the helper left behind is taken over and removed.
func TestPkgNoServiceStarts(t *testing.T) {
	policy := func(f *fakeDebian) string {
		b, _ := os.ReadFile(filepath.Join(f.root, "usr/sbin/policy-rc.d"))
		return string(b)
	}
	policed := func(f *fakeDebian) bool {
		for _, l := range f.log(t) {
			if strings.HasPrefix(l, "policy ") && strings.HasSuffix(l, " exit 101") {
				return true
			}
		}
		return false
	}

	f := newFakeDebian(t, "0")
	if out, code := f.run(t, "pkg_install a"); code != 0 || !policed(f) || policy(f) != "" {
		t.Fatalf("exit %d; policy during the install: %v; after: %q\n%s", code, policed(f), policy(f), out)
	}

	f = newFakeDebian(t, "0")
	const theirs = "#!/bin/sh\n# the machine's own\nexit 101\n"
	os.WriteFile(filepath.Join(f.root, "usr/sbin/policy-rc.d"), []byte(theirs), 0o755)
	if out, code := f.run(t, "pkg_install a"); code != 0 || !policed(f) || policy(f) != theirs {
		t.Fatalf("exit %d: the machine's policy-rc.d changed to %q\n%s", code, policy(f), out)
	}

	f = newFakeDebian(t, "0")
	stale := "#!/bin/sh\n# agentsandbox: no service starts during an install (scripts/lib/pkg.sh)\nexit 101\n"
	os.WriteFile(filepath.Join(f.root, "usr/sbin/policy-rc.d"), []byte(stale), 0o755)
	if out, code := f.run(t, "pkg_install a"); code != 0 || policy(f) != "" {
		t.Fatalf("exit %d: a killed run's policy-rc.d is still there: %q\n%s", code, policy(f), out)
	}
}

// TestPkgCompletesInterruptedDpkg: a dpkg run that was killed half-way (its updates
// directory not empty) is completed before the install, or apt-get would refuse.
func TestPkgCompletesInterruptedDpkg(t *testing.T) {
	f := newFakeDebian(t, "0")
	os.WriteFile(filepath.Join(f.root, "var/lib/dpkg/updates/0001"), []byte("x"), 0o644)
	out, code := f.run(t, "pkg_install a")
	log := f.log(t)
	if code != 0 || len(log) < 2 || !strings.HasPrefix(log[0], "configure ") || !strings.HasPrefix(log[1], "start ") {
		t.Fatalf("exit %d, log %q: want dpkg --configure -a before apt-get\n%s", code, log, out)
	}
}

// TestPkgFreshReinstalls: in the new-machine mode (SANDBOX_FRESH_DIR) installed packages
// are reinstalled, downloaded again into the fresh directory, after one update of the
// lists; each once per run.
func TestPkgFreshReinstalls(t *testing.T) {
	f := newFakeDebian(t, "0", "a", "b")
	fresh := t.TempDir()
	out, code := f.run(t, "pkg_install a b; pkg_install b; pkg_install a c", "SANDBOX_FRESH_DIR="+fresh)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	calls := f.calls(t)
	if len(calls) != 3 || count(calls[:1], "update") != 1 {
		t.Fatalf("calls %q: want update, reinstall a b, install c", calls)
	}
	if !strings.Contains(calls[1], "--reinstall") || !strings.HasSuffix(calls[1], " a b") || !strings.HasSuffix(calls[2], " c") || strings.Contains(calls[2], " a ") {
		t.Errorf("calls %q: want a and b reinstalled once, then only c", calls)
	}
	if !strings.Contains(calls[1], "Dir::Cache::Archives="+fresh+"/apt-archives/") {
		t.Errorf("the packages are not downloaded again into the fresh directory: %s", calls[1])
	}
}

// TestFreshRunIsOnePackageRun: under scripts/fresh.sh the scripts a command runs are one
// package run, as on a new machine: the lists are updated once and a package two scripts
// ask for is reinstalled once (each script sourcing the helper used to be a run of its own).
func TestFreshRunIsOnePackageRun(t *testing.T) {
	f := newFakeDebian(t, "0", "a", "b")
	helper, err := filepath.Abs(filepath.Join(scriptsDir, "lib", "pkg.sh"))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := filepath.Abs(filepath.Join(scriptsDir, "fresh.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := func(pkgs string) string { return `bash -c '. ` + helper + `; pkg_install ` + pkgs + `'` }
	cmd := exec.Command("bash", fresh, "bash", "-c", script("a")+" && "+script("a b"))
	cmd.Env = f.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	calls := f.calls(t)
	if len(calls) != 3 || count(calls, "update") != 1 || !strings.HasSuffix(calls[1], " a") || !strings.HasSuffix(calls[2], " b") {
		t.Fatalf("calls %q: want one update, a reinstalled, then only b", calls)
	}
}
