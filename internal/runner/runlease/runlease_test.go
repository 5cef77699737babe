package runlease

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdEnv makes the test binary a lease holder: it holds the lease named by the
// variable (root|owner|run), says so on stdout, and waits to be killed.
const holdEnv = "RUNLEASE_TEST_HOLD"

func TestMain(m *testing.M) {
	if v := os.Getenv(holdEnv); v != "" {
		f := strings.Split(v, "|")
		root := f[0]
		if root == "" {
			root = DefaultRoot()
		}
		if _, err := Hold(root, f[1], f[2], KindRun); err != nil {
			fmt.Println("hold:", err)
			os.Exit(3)
		}
		fmt.Printf("held pid=%d\n", os.Getpid())
		time.Sleep(10 * time.Minute)
		os.Exit(4)
	}
	os.Exit(m.Run())
}

func TestHoldRelease(t *testing.T) {
	root := t.TempDir()
	l, err := Hold(root, "owner", "run-1", KindRun)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(root, "owner", "run-1") {
		t.Error("a held lease is not Held")
	}
	if Held(root, "other", "run-1") || Held(root, "owner", "run-2") {
		t.Error("Held for another owner or run")
	}
	l.Release()
	l.Release()
	if Held(root, "owner", "run-1") {
		t.Error("a released lease is still Held")
	}
	if _, err := os.Stat(filepath.Join(root, "owner", "run-1")); !os.IsNotExist(err) {
		t.Errorf("the run's directory outlived its last lease: %v", err)
	}
}

// TestTwoHolders: two holders of one run (two handles of a session) each keep it
// held; the first to let go does not erase the other's lease.
func TestTwoHolders(t *testing.T) {
	root := t.TempDir()
	a, err := Hold(root, "owner", "run-1", KindSession)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Hold(root, "owner", "run-1", KindSession)
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	if !Held(root, "owner", "run-1") {
		t.Error("releasing one holder's lease released the other's")
	}
	if n := Prune(root, "owner"); n != 0 {
		t.Errorf("Prune removed %d leases of a live holder", n)
	}
	b.Release()
	if Held(root, "owner", "run-1") {
		t.Error("still Held after both released")
	}
}

// startHolder starts the test binary holding owner/run under root ("" the default
// root) with the given command prefix (unshare...) and environment, and returns it
// once it holds the lease.
func startHolder(t *testing.T, prefix []string, env []string, root, owner, run string) *exec.Cmd {
	t.Helper()
	argv := append(append([]string(nil), prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...), holdEnv+"="+root+"|"+owner+"|"+run)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("the holder did not take its lease: %q %v", line, err)
	}
	t.Logf("holder: %s", strings.TrimSpace(line))
	return cmd
}

// killHolder kills a holder and waits for it to be gone.
func killHolder(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// TestDeadHolderReleases: a holder killed without warning releases its lease at once
// (the kernel drops its lock), and Prune removes what it left.
func TestDeadHolderReleases(t *testing.T) {
	root := t.TempDir()
	cmd := startHolder(t, nil, nil, root, "owner", "run-1")
	live, err := Hold(root, "owner", "live", KindRun)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	if !Held(root, "owner", "run-1") {
		t.Fatal("another process's live lease is not Held")
	}
	if n := Prune(root, "owner"); n != 0 {
		t.Errorf("Prune removed %d leases of live holders", n)
	}
	killHolder(t, cmd)
	if Held(root, "owner", "run-1") {
		t.Error("the lease of a killed holder is still Held")
	}
	if n := Prune(root, "owner"); n != 1 {
		t.Errorf("Prune removed %d, want the dead holder's lease only", n)
	}
	if !Held(root, "owner", "live") {
		t.Error("Prune removed a held lease")
	}
	if _, err := os.Stat(filepath.Join(root, "owner", "run-1")); !os.IsNotExist(err) {
		t.Errorf("the dead holder's run directory is still there: %v", err)
	}
}

// TestHolderInOwnPIDNamespace: a holder in its own PID namespace (pid 1 there) is live
// for a sweeper in this one, and dead once killed. The old leases named pid 1, which a
// sweeper here took for its own init with another start time: a dead holder.
func TestHolderInOwnPIDNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is required")
	}
	owner := fmt.Sprintf("pidns-%d", os.Getpid())
	// The default root: where the runners keep their leases.
	t.Cleanup(func() { Prune(DefaultRoot(), owner) })
	cmd := startHolder(t, []string{"unshare", "--pid", "--fork", "--kill-child"}, nil, "", owner, "run-1")
	if !Held(DefaultRoot(), owner, "run-1") {
		t.Fatal("a live holder in its own PID namespace is not Held")
	}
	ls, err := List(DefaultRoot(), owner)
	if err != nil || len(ls) != 1 || !ls[0].Held || ls[0].PID != 1 || ls[0].Kind != KindRun {
		t.Errorf("List = %+v, %v; want one held run lease naming pid 1 (the holder's own namespace)", ls, err)
	}
	killHolder(t, cmd)
	waitReleased(t, DefaultRoot(), owner, "run-1")
}

// TestHolderWithOtherTempDir: a host with another TMPDIR (a private /tmp) keeps its
// leases where a sweeper with the usual one finds them.
func TestHolderWithOtherTempDir(t *testing.T) {
	owner := fmt.Sprintf("tmpdir-%d", os.Getpid())
	t.Cleanup(func() { Prune(DefaultRoot(), owner) })
	other := t.TempDir()
	cmd := startHolder(t, nil, []string{"TMPDIR=" + other}, "", owner, "run-1")
	if !Held(DefaultRoot(), owner, "run-1") {
		t.Fatal("the lease of a host with another TMPDIR is not found")
	}
	killHolder(t, cmd)
	waitReleased(t, DefaultRoot(), owner, "run-1")
}

// waitReleased waits for the kernel to drop a killed holder's lock (unshare's child
// dies with it, a moment later).
func waitReleased(t *testing.T, root, owner, run string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); Held(root, owner, run); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the lease of a killed holder is still Held")
		}
	}
	if n := Prune(root, owner); n != 1 {
		t.Errorf("Prune removed %d leases, want the killed holder's", n)
	}
}

func TestDefaultRootIgnoresTempDir(t *testing.T) {
	a := DefaultRoot()
	t.Setenv("TMPDIR", t.TempDir())
	if b := DefaultRoot(); a != b && os.Geteuid() == 0 {
		t.Errorf("DefaultRoot moved with TMPDIR: %s -> %s", a, b)
	}
}

func TestBadNames(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b", ".hidden"} {
		if _, err := Hold(t.TempDir(), "owner", n, KindRun); err == nil {
			t.Errorf("Hold(%q) succeeded", n)
		}
	}
}

// TestRemoveDead: a sweeper removes exactly the dead leases it listed; a live one is
// refused, one already gone is success.
func TestRemoveDead(t *testing.T) {
	root := t.TempDir()
	cmd := startHolder(t, nil, nil, root, "owner", "dead")
	live, err := Hold(root, "owner", "live", KindRun)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	killHolder(t, cmd)
	ls, err := List(root, "owner")
	if err != nil || len(ls) != 2 {
		t.Fatalf("List = %+v, %v", ls, err)
	}
	for _, l := range ls {
		err := RemoveDead(root, l)
		switch {
		case l.Held && !errors.Is(err, ErrHeld):
			t.Errorf("RemoveDead of a held lease = %v, want ErrHeld", err)
		case !l.Held && err != nil:
			t.Errorf("RemoveDead of a dead lease = %v", err)
		case !l.Held:
			if err := RemoveDead(root, l); err != nil {
				t.Errorf("RemoveDead of a lease already gone = %v, want success", err)
			}
		}
	}
	if !Held(root, "owner", "live") || Held(root, "owner", "dead") {
		t.Error("RemoveDead removed the wrong lease")
	}
	if _, err := os.Stat(filepath.Join(root, "owner", "dead")); !os.IsNotExist(err) {
		t.Errorf("the dead run's directory is left: %v", err)
	}
	if err := RemoveDead(root, Info{Owner: "owner", RunID: "../x", Holder: "h"}); err == nil {
		t.Error("RemoveDead took a bad name")
	}
}
