package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

func TestSessionPauseFacadeDocker(t *testing.T)     { testSessionPauseFacade(t, dockerRunner) }
func TestSessionPauseFacadeContainerd(t *testing.T) { testSessionPauseFacade(t, containerdRunner) }

// testSessionPauseFacade: a facade session with output and LLM calls on both sides
// of a pause. The main process counts in memory (its output stops while paused and
// goes on without a gap); execs make LLM calls before and after; a streamed call is
// in flight when the sandbox freezes and completes after the resume, its response
// held in the socket meanwhile; an exec while paused fails with ErrPaused; Stop
// returns the audit of every call, reconciled against the (fake) LiteLLM. About 10 s
// per runtime.
func testSessionPauseFacade(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	// Chunks 150 ms apart: the stream is still coming when the sandbox freezes.
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200*time.Millisecond), litellmtest.WithChunkDelay(150*time.Millisecond),
		litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
			return litellmtest.Reply{Content: "one two three four five six"}
		}))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)
	ws := newWorkspace(t)
	sess, err := sb.Start(ctx, sandbox.SessionRequest{Request: sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("sesspause"), Image: image,
		Argv:         []string{"/agent", "ticks", port.WorkspacePath + "/progress"},
		WorkspaceDir: ws, Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-pause", UserID: "u-1"},
		Budget:      port.Budget{MaxCalls: 10},
		Limits:      port.Limits{Timeout: 5 * time.Minute},
		Reconcile:   true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = sess.Stop(context.Background(), time.Second)
		}
	}()
	progress := func() int {
		for i := 0; ; i++ {
			b, err := os.ReadFile(filepath.Join(ws, "progress"))
			if n, cerr := strconv.Atoi(string(b)); err == nil && cerr == nil {
				return n
			}
			if i > 100 {
				t.Fatalf("progress: %q %v", b, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	exec := func(argv ...string) string {
		t.Helper()
		r, err := sess.Exec(ctx, port.ExecSpec{Argv: argv, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("exec %q: %v", argv, err)
		}
		return string(r.Stdout)
	}
	if out := exec("/agent", "calls", "2", "gpt-4o-mini"); strings.Count(out, "status 200") != 2 {
		t.Fatalf("calls before the pause:\n%s", out)
	}

	// A streamed call in flight: the pause comes after its first chunk.
	acks := filepath.Join(ws, "acks")
	if err := os.Mkdir(acks, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(acks, 0o777); err != nil {
		t.Fatal(err)
	}
	streamed := make(chan string, 1)
	go func() {
		r, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "stream", "gpt-4o-mini", "in flight", port.WorkspacePath + "/acks"}, Timeout: time.Minute})
		if err != nil {
			streamed <- "error: " + err.Error()
			return
		}
		streamed <- string(r.Stdout)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(acks, "chunk-0")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the streamed call's first chunk never arrived")
		}
	}
	if err := sess.Pause(ctx, port.PauseOptions{}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if !sess.PauseState().Paused {
		t.Errorf("PauseState: %+v", sess.PauseState())
	}
	frozenAt := progress()
	chunksAt, _ := os.ReadDir(acks)
	if _, err := sess.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "id"}}); !errors.Is(err, port.ErrPaused) {
		t.Errorf("exec while paused: %v, want ErrPaused", err)
	}
	time.Sleep(1500 * time.Millisecond) // the upstream finishes the stream meanwhile
	if n := progress(); n != frozenAt {
		t.Errorf("the paused process counted from %d to %d", frozenAt, n)
	}
	if chunks, _ := os.ReadDir(acks); len(chunks) != len(chunksAt) {
		t.Errorf("the paused agent read chunks: %d before, %d after", len(chunksAt), len(chunks))
	}
	if err := sess.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case out := <-streamed:
		if !strings.Contains(out, "status 200") || !strings.Contains(out, "data: [DONE]") {
			t.Errorf("the call in flight across the pause:\n%s", out)
		}
		// Some of the stream arrived after the resume: it was in flight.
		if got := strings.Count(out, "data: "); got <= len(chunksAt) {
			t.Errorf("the agent had read %d of the stream's %d events before the pause: it was not in flight", len(chunksAt), got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the streamed call never finished after the resume")
	}
	if out := exec("/agent", "calls", "2", "gpt-4o-mini"); strings.Count(out, "status 200") != 2 {
		t.Fatalf("calls after the resume:\n%s", out)
	}
	for deadline := time.Now().Add(10 * time.Second); progress() < frozenAt+5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the process does not count after the resume")
		}
	}

	res, err := sess.Stop(ctx, time.Second)
	stopped = true
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if len(res.Audit) != 5 {
		t.Errorf("audit has %d records, want 5 (2 before, 1 across, 2 after)", len(res.Audit))
	}
	for _, a := range res.Audit {
		if a.Status != 200 {
			t.Errorf("audited call %+v", a)
		}
	}
	if res.Usage == nil || res.Usage.Total.Calls != 5 || len(res.Usage.Missing) != 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	// The count went on from where it stopped: the process's memory survived.
	var prev int
	for _, l := range strings.Split(strings.TrimSpace(string(res.Run.Stdout)), "\n") {
		n, err := strconv.Atoi(strings.TrimPrefix(l, "tick "))
		if err != nil {
			continue
		}
		if prev != 0 && n != prev+1 {
			t.Fatalf("tick %d follows tick %d", n, prev)
		}
		prev = n
	}
	if prev <= frozenAt {
		t.Errorf("the last tick in the result is %d, the pause came at %d", prev, frozenAt)
	}
}
