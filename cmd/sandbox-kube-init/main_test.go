package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("SANDBOX_KUBE_INIT_TEST_MAIN") == "1" {
		os.Args = append([]string{"sandbox-kube-init"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// decode splits the init's stdout into its two streams and its end frame.
func decode(t *testing.T, b []byte) (out, errs, end string) {
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		kind, data, _ := strings.Cut(l, " ")
		switch kind {
		case "o", "e":
			d, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				t.Fatalf("bad frame %q", l)
			}
			if kind == "o" {
				out += string(d)
			} else {
				errs += string(d)
			}
		case "t":
			end = data
		default:
			t.Fatalf("not a frame: %q", l)
		}
	}
	return out, errs, end
}

// TestRunFramesStreamsKeepsEnvLowersNofile runs the init as the agent container would
// start it: the command's two streams come back framed and capped, only the kept
// variables reach it, RLIMIT_NOFILE is lowered and the exit code passes through.
func TestRunFramesStreamsKeepsEnvLowersNofile(t *testing.T) {
	cmd := exec.Command(os.Args[0], "run", "-keep", "KEEP_ME", "-nofile", "100", "-max", "64", "--",
		"/bin/sh", "-c", `echo "keep=$KEEP_ME drop=$DROP_ME nofile=$(ulimit -n)"; echo to-stderr >&2; head -c 500 /dev/zero | tr '\0' x; exit 3`)
	cmd.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1", "KEEP_ME=yes", "DROP_ME=no", "KUBERNETES_SERVICE_HOST=10.0.0.1")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit: %v", err)
	}
	out, errs, end := decode(t, stdout.Bytes())
	if !strings.HasPrefix(out, "keep=yes drop= nofile=100\n") || len(out) != 64 || errs != "to-stderr\n" || end != "true false" {
		t.Errorf("out=%q (%d bytes) err=%q end=%q", out, len(out), errs, end)
	}
}

func TestRunReportsACommandThatCannotStart(t *testing.T) {
	cmd := exec.Command(os.Args[0], "run", "--", "/no/such/binary")
	cmd.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("exit: %v", err)
	}
	if _, errs, _ := decode(t, stdout.Bytes()); !strings.Contains(errs, "cannot start the command") {
		t.Errorf("stderr %q", errs)
	}
}

// TestRunSetsEnvAndDir: a session's exec adds its variables (replacing a kept one of
// the same name) and runs in its directory; a malformed -env is refused.
func TestRunSetsEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "run", "-keep", "KEEP_ME", "-env", "EXTRA=a b", "-env", "KEEP_ME=replaced", "-dir", dir, "--",
		"/bin/sh", "-c", `echo "extra=$EXTRA keep=$KEEP_ME pwd=$(pwd)"`)
	cmd.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1", "KEEP_ME=yes")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if out, _, _ := decode(t, stdout.Bytes()); out != "extra=a b keep=replaced pwd="+dir+"\n" {
		t.Errorf("out=%q", out)
	}
	bad := exec.Command(os.Args[0], "run", "-env", "NOVALUE", "--", "/bin/true")
	bad.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1")
	var ee *exec.ExitError
	if err := bad.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("a malformed -env: %v, want exit 2", err)
	}
}

// TestRunPidFrameAndKill: with -pid the init's first line names its process, and the
// kill mode's TERM reaches the command through it (exit 128+15); bad kill arguments
// are refused, PID 1 included.
func TestRunPidFrameAndKill(t *testing.T) {
	cmd := exec.Command(os.Args[0], "run", "-pid", "--", "/bin/sleep", "30")
	cmd.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 0, 32)
	for b := make([]byte, 1); ; {
		if _, err := stdout.Read(b); err != nil || b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	if want := "p " + strconv.Itoa(cmd.Process.Pid); string(line) != want {
		t.Fatalf("first line %q, want %q", line, want)
	}
	time.Sleep(100 * time.Millisecond) // the command has started and the handler is set
	k := exec.Command(os.Args[0], "kill", "-TERM", strconv.Itoa(cmd.Process.Pid))
	k.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1")
	if out, err := k.CombinedOutput(); err != nil {
		t.Fatalf("kill: %v %s", err, out)
	}
	_, _ = io.Copy(io.Discard, stdout)
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 128+15 {
		t.Errorf("exit after TERM: %v, want %d", err, 128+15)
	}
	for _, args := range [][]string{{"-TERM", "1"}, {"-HUP", "2"}, {"-TERM", "x"}, {"-TERM"}} {
		k := exec.Command(os.Args[0], append([]string{"kill"}, args...)...)
		k.Env = append(os.Environ(), "SANDBOX_KUBE_INIT_TEST_MAIN=1")
		if err := k.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("kill %v: %v, want exit 2", args, err)
		}
	}
}
