package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

type runnerFunc func(testing.TB, string) (port.SandboxRunner, string)

func TestFacadeDocker(t *testing.T)     { testFacade(t, dockerRunner) }
func TestFacadeContainerd(t *testing.T) { testFacade(t, containerdRunner) }

// testFacade runs the facade's result features against a real sandbox, proxy and
// (fake) LiteLLM: the workspace helper and check, budget outcomes, reconciliation of
// a cancelled run, asynchronous reconciliation, live output.
func testFacade(t *testing.T, newRunner runnerFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	req := func(name string, argv ...string) sandbox.Request {
		return sandbox.Request{
			Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID(name), Image: image,
			Argv: append([]string{"/agent"}, argv...), WorkspaceDir: newWorkspace(t), Model: "gpt-4o-mini",
			Attribution: port.Attribution{BillingAccountID: "acct-facade"},
			Limits:      port.Limits{Timeout: time.Minute, MemoryBytes: 128 << 20},
		}
	}

	t.Run("Workspace", func(t *testing.T) {
		fake := litellmtest.NewServer()
		defer fake.Close()
		sb, _ := newStack(t, runner, fake)
		w, err := sandbox.NewWorkspace("", "")
		if err != nil {
			t.Fatal(err)
		}
		r := req("fws", "write", "/workspace/out.txt", "from-agent")
		r.WorkspaceDir = w.Dir()
		if res, err := sb.Run(ctx, r); err != nil || res.Run.ExitCode != 0 {
			t.Fatalf("agent could not write its workspace: %v %+v", err, res)
		}
		root, err := w.Root()
		if err != nil {
			t.Fatal(err)
		}
		b, err := root.ReadFile("out.txt")
		root.Close()
		if err != nil || string(b) != "from-agent" {
			t.Errorf("host read %q, %v", b, err)
		}
		// Hostile leftovers: links out, a FIFO, a tree locked with mode 0.
		// The links point at a canary directory of this test, never at a system path.
		canary := t.TempDir()
		if err := os.WriteFile(filepath.Join(canary, "keep"), []byte("canary"), 0o600); err != nil {
			t.Fatal(err)
		}
		r = req("fwsplant", "plant", "/workspace", canary)
		r.WorkspaceDir = w.Dir()
		if res, err := sb.Run(ctx, r); err != nil || res.Run.ExitCode != 0 {
			t.Fatalf("plant: %v %+v", err, res)
		}
		if err := w.Remove(); err != nil {
			t.Errorf("Remove after a hostile run: %v", err)
		}
		if _, err := os.Lstat(filepath.Dir(w.Dir())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the workspace is still there: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(canary, "keep")); err != nil || string(b) != "canary" {
			t.Errorf("Remove followed a link out: %q, %v", b, err)
		}
		// A directory the sandbox user cannot write: refused before anything starts.
		bad := t.TempDir()
		if err := os.Chmod(bad, 0o755); err != nil {
			t.Fatal(err)
		}
		r = req("fwsbad", "id")
		r.WorkspaceDir = bad
		_, err = sb.Run(ctx, r)
		var we *sandbox.WorkspaceError
		if os.Getuid() != 1001 && (!errors.As(err, &we) || we.UID != 1001 || we.Mode != 0o755) {
			t.Errorf("unusable workspace: err = %v", err)
		}
	})

	t.Run("Budget", func(t *testing.T) {
		fake := litellmtest.NewServer()
		defer fake.Close()
		sb, _ := newStack(t, runner, fake)
		r := req("fbudget", "calls", "4", "gpt-4o-mini")
		r.Budget = port.Budget{MaxCalls: 2}
		r.FailOnBudget = true
		res, err := sb.Run(ctx, r)
		if !errors.Is(err, port.ErrBudgetExceeded) || res == nil {
			t.Fatalf("err = %v", err)
		}
		if got := strings.Count(string(res.Run.Stdout), "status 200"); got != 2 {
			t.Errorf("%d calls passed a budget of 2: %s", got, res.Run.Stdout)
		}
		p := res.Policy
		if !p.BudgetExceeded || len(p.Blocked) != 2 || p.Blocked[0].Model != "gpt-4o-mini" || p.Blocked[0].Status != 429 ||
			!strings.HasPrefix(p.Blocked[0].Blocked, "budget_exceeded") {
			t.Errorf("policy %+v", p)
		}
	})

	t.Run("CancelledRunReconciled", func(t *testing.T) {
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(300 * time.Millisecond))
		defer fake.Close()
		sb, _ := newStack(t, runner, fake)
		barrier := newWorkspace(t) // never written: the agent holds until cancelled
		r := req("fcancel", "hold", "/workspace/never", "gpt-4o-mini", "one call")
		r.WorkspaceDir = barrier
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		// The host gives up once the call is made: the live output says so.
		r.Stdout = &watch{want: "status 200", seen: rcancel}
		r.Reconcile = true
		res, err := sb.Run(rctx, r)
		if !errors.Is(err, context.Canceled) || res == nil {
			t.Fatalf("err = %v, res = %+v", err, res)
		}
		if res.Usage == nil || res.Usage.Total.Calls != 1 || len(res.Usage.Missing) != 0 || len(res.Audit) != 1 {
			t.Errorf("a cancelled run's billed call was not reconciled: usage %+v audit %d", res.Usage, len(res.Audit))
		}
	})

	t.Run("AsyncReconcile", func(t *testing.T) {
		const delay = 3 * time.Second
		fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(delay))
		defer fake.Close()
		sb, _ := newStack(t, runner, fake)
		r := req("fasync", "calls", "2", "gpt-4o-mini")
		r.ReconcileAsync = true
		res, err := sb.Run(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		if res.Usage != nil || res.Reconciling == nil {
			t.Fatalf("usage %v reconciling %v", res.Usage, res.Reconciling)
		}
		// Run returned before LiteLLM had written the run's spend rows.
		for _, row := range fake.SpendRows() {
			if !row.VisibleAt.After(returned) {
				t.Errorf("a spend row was visible (at %v) before Run returned (%v): Run waited", row.VisibleAt, returned)
			}
		}
		usage, err := res.Reconciling.Wait(ctx)
		if err != nil || usage.Total.Calls != 2 || len(usage.Missing) != 0 {
			t.Errorf("usage %+v, err %v", usage, err)
		}
	})
}

// watch calls seen once its stream has shown want.
type watch struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen func()
	done bool
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		w.seen()
	}
	return len(p), nil
}
