package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tripwire runs scripts/tripwire.sh over the given paths only (never the real system
// files: a change is proved on canaries this test made).
func tripwire(t *testing.T, files []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../../../scripts/tripwire.sh"}, args...)...)
	cmd.Env = append(os.Environ(), "SANDBOX_TRIPWIRE_FILES="+strings.Join(files, ":"), "SANDBOX_TRIPWIRE_EXTRA=")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestTripwire: a change to a watched file fails the check and names the file; an
// untouched list passes. Every kind of change counts: content, mode, a link put in the
// file's place, removal, a new file in a watched directory, a file that appears.
func TestTripwire(t *testing.T) {
	dir := t.TempDir()
	shadow := filepath.Join(dir, "shadow")
	keys := filepath.Join(dir, "ssh")
	absent := filepath.Join(dir, "ld.so.preload")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(shadow, "root:*:20000:0:99999:7:::\n")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(keys, "authorized_keys"), "ssh-ed25519 AAAA canary\n")
	files := []string{shadow, keys, absent}
	state := filepath.Join(t.TempDir(), "state")

	record := func() {
		t.Helper()
		if out, code := tripwire(t, files, "record", state); code != 0 {
			t.Fatalf("record: %d %s", code, out)
		}
	}
	record()
	if out, code := tripwire(t, files, "check", state); code != 0 || out != "" {
		t.Fatalf("untouched files: exit %d, %q", code, out)
	}
	for name, c := range map[string]struct {
		change func()
		path   string
	}{
		"content":        {func() { write(shadow, "[core]\n\tfsmonitor = touch /tmp/x\n") }, shadow},
		"mode":           {func() { os.Chmod(shadow, 0o644) }, shadow},
		"link in place":  {func() { os.Remove(shadow); os.Symlink(filepath.Join(dir, "elsewhere"), shadow) }, shadow},
		"removed":        {func() { os.Remove(shadow) }, shadow},
		"file in a dir":  {func() { write(filepath.Join(keys, "authorized_keys2"), "ssh-ed25519 BBBB agent\n") }, keys},
		"file appears":   {func() { write(absent, "/tmp/evil.so\n") }, absent},
		"dir file edits": {func() { write(filepath.Join(keys, "authorized_keys"), "ssh-ed25519 CCCC agent\n") }, keys},
	} {
		t.Run(name, func(t *testing.T) {
			// Restore the recorded state first.
			os.Remove(shadow)
			os.Remove(absent)
			os.Remove(filepath.Join(keys, "authorized_keys2"))
			write(shadow, "root:*:20000:0:99999:7:::\n")
			write(filepath.Join(keys, "authorized_keys"), "ssh-ed25519 AAAA canary\n")
			record()
			c.change()
			out, code := tripwire(t, files, "check", state)
			if code != 1 || !strings.Contains(out, "tripwire: "+c.path+" changed") {
				t.Fatalf("exit %d, %q: want a failure naming %s", code, out, c.path)
			}
			if n := strings.Count(out, "tripwire:"); n != 1 {
				t.Errorf("%d files named, want only %s:\n%s", n, c.path, out)
			}
		})
	}
	// With no override, the list watches the system's sensitive files.
	cmd := exec.Command("bash", "../../../scripts/tripwire.sh", "list")
	cmd.Env = append(os.Environ(), "SANDBOX_TRIPWIRE_FILES=", "SANDBOX_TRIPWIRE_EXTRA=")
	def, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/etc/shadow", "/etc/passwd", "/etc/gshadow", "/etc/sudoers", "/root/.gitconfig", "/root/.ssh", "/etc/docker/daemon.json"} {
		if !strings.Contains("\n"+string(def), "\n"+want+"\n") {
			t.Errorf("the default list does not watch %s:\n%s", want, def)
		}
	}
}

// TestRepairShadow: scripts/repair-shadow.sh puts the previous shadow file back when an
// earlier run replaced it with a git config, only when that file names exactly the
// users of passwd, and never touches a well-formed one (all on copies, never /etc).
func TestRepairShadow(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the script acts only as root")
	}
	const passwd = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
	const good = "root:*:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"
	const hostile = "[core]\n\tfsmonitor = touch /tmp/marker\n[include]\n\tpath = x\n"
	run := func(etc string) (string, int) {
		cmd := exec.Command("bash", "../../../scripts/repair-shadow.sh")
		cmd.Env = append(os.Environ(), "SANDBOX_REPAIR_ETC="+etc)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	setup := func(shadow, previous string) string {
		etc := t.TempDir()
		for name, c := range map[string]string{"passwd": passwd, "shadow": shadow, "shadow-": previous} {
			if err := os.WriteFile(filepath.Join(etc, name), []byte(c), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		return etc
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }

	etc := setup(hostile, good)
	if out, code := run(etc); code != 0 || read(filepath.Join(etc, "shadow")) != good || read(filepath.Join(etc, "shadow.damaged-by-tests")) != hostile {
		t.Errorf("damaged: exit %d %s; shadow now %q", code, out, read(filepath.Join(etc, "shadow")))
	}
	etc = setup(good, "root:*:1:0:99999:7:::\n")
	if _, code := run(etc); code != 0 || read(filepath.Join(etc, "shadow")) != good {
		t.Errorf("a well-formed shadow was changed: %q", read(filepath.Join(etc, "shadow")))
	}
	etc = setup(hostile, "root:*:20228:0:99999:7:::\n") // the previous one lacks a user
	if out, code := run(etc); code != 1 || read(filepath.Join(etc, "shadow")) != hostile || !strings.Contains(out, "by hand") {
		t.Errorf("an incomplete backup was used: exit %d %s", code, out)
	}
}
