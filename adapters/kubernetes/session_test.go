package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/agentsandbox/sandbox/internal/runner/session"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestSessionConformance runs the session suite on the test cluster, through the
// runner's least-privilege identity. About a minute.
func TestSessionConformance(t *testing.T) {
	e := setup(t)
	// A short root: the exposed sockets' paths must stay under 108 bytes.
	root, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	owner := testenv.Owner(sandboxtest.RunID("kubesess"))
	r := e.runner(t, WithOwner(owner), WithSessionDir(root))
	if !r.RunnerCapabilities().Sessions {
		t.Fatal("the runner does not declare sessions")
	}
	sandboxtest.TestSessions(t, sandboxtest.SessionHarness{
		Runner: r,
		Reopen: func(t *testing.T) port.SessionRunner { return e.runner(t, WithOwner(owner), WithSessionDir(root)) },
		Image:  e.image,
		Leftovers: func(ctx context.Context, runID string) ([]string, error) {
			sel := labels.Set{port.LabelOwner: owner, port.LabelRunID: runLabel(runID)}
			pods, err := e.cluster.Client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
			if err != nil {
				return nil, err
			}
			var left []string
			for _, p := range pods.Items {
				left = append(left, "pod:"+p.Name+"("+string(p.Status.Phase)+")")
			}
			return left, nil
		},
		AgeHeartbeat: func(s port.Session, d time.Duration) error {
			p, err := s.Expose(7000)
			if err != nil {
				return err
			}
			return session.AgeHeartbeat(filepath.Dir(filepath.Dir(p)), time.Now().Add(-d))
		},
		// The node's log file keeps what the agent wrote while no host was attached
		// (up to the kubelet's rotation size), and a re-attached handle replays it
		// from the start: nothing is dropped before the ring, so nothing is counted;
		// what the kubelet's rotation drops is not counted either.
	})
}

// TestSessionKubernetesSpecifics: an exec sees only the spec's environment (not the
// kubelet's KUBERNETES_* variables) with the session's open-files limit, and a session
// Pod deleted by someone else ends the session with a *PodLostError. About 5 s.
func TestSessionKubernetesSpecifics(t *testing.T) {
	e := setup(t)
	root, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	owner := testenv.Owner(sandboxtest.RunID("kubesess2"))
	r := e.runner(t, WithOwner(owner), WithSessionDir(root))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := r.Start(ctx, port.SessionSpec{RunSpec: port.RunSpec{
		RunID: sandboxtest.RunID("kspec"), Image: e.image, Argv: []string{"/agent", "sleep", "300"},
		Env: map[string]string{"ONLY": "this"}, Limits: port.Limits{OpenFiles: 77},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background(), time.Second)
	res, err := s.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "env"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), "KUBERNETES_") || !strings.Contains(string(res.Stdout), "ONLY=this\n") {
		t.Errorf("exec environment:\n%s", res.Stdout)
	}
	res, err = s.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "cat", "/proc/self/limits"}})
	if err != nil || !regexp.MustCompile(`Max open files +77 +77 `).Match(res.Stdout) {
		t.Errorf("exec open-files limit: %q %q %v", res.Stdout, res.Stderr, err)
	}
	// An exec whose caller gives up ends inside too (the subresource alone would leave
	// it running until its bridge's deadline, here minutes away). The test cluster's
	// node is this host: the exec's process is found by its unique argv.
	const marker = "/agent\x00sleep\x00287\x00"
	execCtx, stopExec := context.WithCancel(ctx)
	execDone := make(chan error, 1)
	go func() {
		_, err := s.Exec(execCtx, port.ExecSpec{Argv: []string{"/agent", "sleep", "287"}, Timeout: 5 * time.Minute})
		execDone <- err
	}()
	waitFor := func(present bool, within time.Duration) bool {
		for end := time.Now().Add(within); ; {
			if hostHasProcess(marker) == present {
				return true
			}
			if time.Now().After(end) {
				return false
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !waitFor(true, 20*time.Second) {
		t.Fatal("the exec's process never appeared")
	}
	stopExec()
	if err := <-execDone; !errors.Is(err, port.ErrTimeout) {
		t.Errorf("a cancelled exec: %v, want ErrTimeout", err)
	}
	// The kill goes through another exec (the API server and the kubelet), with the pid
	// from the exec's first frame (a cancel before that frame used to leave no pid to
	// kill). What matters is that it ends, not at the bridge's deadline minutes away.
	if !waitFor(false, 30*time.Second) {
		t.Error("a cancelled exec's process still runs 30 s later")
	}
	if err := e.cluster.Client.CoreV1().Pods(testNamespace).Delete(ctx, s.ID(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Wait(ctx)
	var lost *PodLostError
	if !errors.As(err, &lost) || !errors.Is(err, port.ErrInternal) || !errors.Is(err, port.ErrRemoved) {
		t.Errorf("a session whose Pod was deleted by someone else: %v, want a *PodLostError that is port.ErrRemoved", err)
	}
	if _, err := s.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrClosed) {
		t.Errorf("Exec after the Pod was lost: %v, want ErrClosed", err)
	}
}

// hostHasProcess reports whether a process on this host has exactly the command line
// marker (NUL-separated).
func hostHasProcess(marker string) bool {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline")); err == nil && string(b) == marker {
			return true
		}
	}
	return false
}
