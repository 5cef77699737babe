package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// hibernateRig is a facade over a runtime with a hibernation store, for the
// hibernate/resume/fork tests.
type hibernateRig struct {
	t      *testing.T
	runner port.SandboxRunner
	image  string
	fake   *litellmtest.Server
	sb     *sandbox.Sandbox
	store  *sandbox.HibernationStore
}

// newHibernateRig is a rig on newRunner's runtime with a fake LiteLLM and a store of
// its own (made with opts), both released when t ends.
func newHibernateRig(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string), opts ...sandbox.StoreOption) *hibernateRig {
	t.Helper()
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200 * time.Millisecond))
	t.Cleanup(fake.Close)
	store, err := sandbox.NewHibernationStore(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return hibernateRigOn(t, newRunner, fake, store)
}

// hibernateRigOn is a rig on newRunner's runtime sharing fake and store with others
// (another host reaching the same store).
func hibernateRigOn(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string), fake *litellmtest.Server, store *sandbox.HibernationStore) *hibernateRig {
	t.Helper()
	bin := testenv.Bridge(t)
	runner, image := newRunner(t, bin)
	sb, _ := newStack(t, runner, fake)
	return &hibernateRig{t: t, runner: runner, image: image, fake: fake, sb: sb, store: store}
}

// openDir is a directory the sandbox's user can write, removed when the test ends.
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "hib-mount-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// request is a session request of the probe agent idling, with a workspace and a
// writable state mount at /state, for account acct.
func (r *hibernateRig) request(prefix, acct string) sandbox.SessionRequest {
	return sandbox.SessionRequest{Request: sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID(prefix), Image: r.image,
		Argv:         []string{"/agent", "sleep", "600"},
		WorkspaceDir: newWorkspace(r.t), Model: "gpt-4o-mini",
		Mounts:      []port.Mount{{Source: openDir(r.t), Target: "/state", Writable: true}},
		Attribution: port.Attribution{BillingAccountID: acct},
		Budget:      port.Budget{MaxCalls: 3},
		Limits:      port.Limits{Timeout: 5 * time.Minute},
		Reconcile:   true,
	}}
}

func (r *hibernateRig) exec(sess *sandbox.Session, argv ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sess.Exec(ctx, port.ExecSpec{Argv: argv})
	if err != nil {
		r.t.Fatalf("exec %q: %v", argv, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// noSandbox fails unless the runner holds nothing of runID.
func (r *hibernateRig) noSandbox(runID string) {
	r.t.Helper()
	rep, err := r.runner.(port.Sweeper).Sweep(context.Background(), port.SweepOptions{RunID: runID, DryRun: true})
	if err != nil {
		r.t.Fatal(err)
	}
	if len(rep.Removed) > 0 {
		r.t.Errorf("run %s left %v", runID, rep.Removed)
	}
}

func (r *hibernateRig) hibernate(sess *sandbox.Session) (*sandbox.Hibernation, *sandbox.Result) {
	r.t.Helper()
	t0 := time.Now()
	h, res, err := sess.Hibernate(context.Background(), sandbox.HibernateOptions{
		Store: r.store, Grace: 2 * time.Second, Mounts: []string{"/state"}, Exclude: []string{"cache", "/state/credentials"},
	})
	if err != nil {
		r.t.Fatalf("Hibernate: %v", err)
	}
	r.t.Logf("hibernated in %v: %+v", time.Since(t0), h.Saved)
	r.noSandbox(sess.RunID())
	return h, res
}

func TestHibernateResumeDocker(t *testing.T)     { testHibernateResume(t, dockerRunner) }
func TestHibernateResumeContainerd(t *testing.T) { testHibernateResume(t, containerdRunner) }

// testHibernateResume: a session's workspace and declared state mount survive a
// hibernation into a fresh sandbox; what is not a file or directory (links, a FIFO)
// and excluded paths are not saved; the key is nowhere in the store; each segment has
// its own run ID, audit and reconciled usage, and the last Result lists both. The
// hibernation is then opened from the store by a second Sandbox (a host restart) and
// run once more (RunFrom). About 10 s per runtime.
func testHibernateResume(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newHibernateRig(t, newRunner)
	fake, store := r.fake, r.store
	req := r.request("hib-a", "acct-hib")
	sess, err := r.sb.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r.exec(sess, "/agent", "write", "/workspace/notes.txt", "written in segment one")
	r.exec(sess, "/agent", "write", "/state/memory", "state of segment one")
	r.exec(sess, "/agent", "plant", "/workspace", "/etc")
	if err := os.MkdirAll(filepath.Join(req.WorkspaceDir, "cache"), 0o777); err != nil {
		t.Fatal(err)
	}
	r.exec(sess, "/agent", "write", "/workspace/cache/big", "not worth carrying")
	if err := os.MkdirAll(filepath.Join(req.Mounts[0].Source, "credentials"), 0o777); err != nil {
		t.Fatal(err)
	}
	r.exec(sess, "/agent", "write", "/state/credentials/device.key", "AGENT-OWN-KEY")
	if out := r.exec(sess, "/agent", "calls", "1", "gpt-4o-mini"); !strings.Contains(out, "status 200") {
		t.Fatalf("call in segment one: %s", out)
	}
	h, res1 := r.hibernate(sess)
	if len(res1.Segments) != 1 || len(res1.Segments[0].Audit) != 1 || res1.Segments[0].Usage == nil || res1.Segments[0].Usage.Total.Calls != 1 {
		t.Errorf("segment one: %+v", res1.Segments)
	}
	if h.Saved.SkippedCount != 3 {
		t.Errorf("skipped %d entries (%v), want the two links and the FIFO", h.Saved.SkippedCount, h.Saved.Skipped)
	}
	assertNotInStore(t, store.Dir(), fake.MasterKey(), "AGENT-OWN-KEY", "not worth carrying")

	// A second Sandbox (another host process) opens it from the store.
	sb2, _ := newStack(t, r.runner, fake)
	h2, err := store.Open(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	req2 := r.request("hib-b", "acct-hib")
	sess2, err := sb2.Resume(ctx, h2, req2)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.exec(sess2, "/agent", "cat", "/workspace/notes.txt"); got != "written in segment one" {
		t.Errorf("the resumed workspace holds %q", got)
	}
	if got := r.exec(sess2, "/agent", "cat", "/state/memory"); got != "state of segment one" {
		t.Errorf("the resumed state mount holds %q", got)
	}
	// The restored files are the sandbox user's: it can change them.
	r.exec(sess2, "/agent", "write", "/workspace/notes.txt", "changed in segment two")
	for _, gone := range []string{"/workspace/root-link", "/workspace/up-link", "/workspace/pipe", "/workspace/cache/big", "/state/credentials/device.key"} {
		if got := r.exec(sess2, "/agent", "stat", gone); got != "missing "+gone+"\n" {
			t.Errorf("%s came back: %s", gone, got)
		}
	}
	if out := r.exec(sess2, "/agent", "calls", "2", "gpt-4o-mini"); strings.Count(out, "status 200") != 2 {
		t.Fatalf("calls in segment two: %s", out)
	}
	res2, err := sess2.Stop(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	segs := res2.Segments
	if len(segs) != 2 || segs[0].RunID != req.RunID || segs[1].RunID != req2.RunID || segs[1].ResumedFrom != h.ID {
		t.Fatalf("segments %+v", segs)
	}
	if len(segs[0].Audit) != 1 || len(segs[1].Audit) != 2 || segs[1].Usage == nil || segs[1].Usage.Total.Calls != 2 || segs[0].Usage.Total.Calls != 1 {
		t.Errorf("segments' audit and usage: %d/%v, %d/%v", len(segs[0].Audit), segs[0].Usage, len(segs[1].Audit), segs[1].Usage)
	}
	// Each segment's calls were attributed to its own run.
	billed := 0
	for _, s := range segs {
		for _, row := range fake.SpendRows() {
			meta, _ := row.Metadata["spend_logs_metadata"].(map[string]any)
			for _, a := range s.Audit {
				if row.RequestID != a.RequestID {
					continue
				}
				billed++
				if meta["run_id"] != s.RunID {
					t.Errorf("call %s of segment %s billed to run %v", a.RequestID, s.RunID, meta["run_id"])
				}
			}
		}
	}
	if billed != 3 {
		t.Errorf("%d of the 3 calls found in the spend logs", billed)
	}

	// The same hibernation once more, as one run: a fork of it.
	req3 := sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("hib-c"), Image: r.image,
		Argv: []string{"/agent", "write", "/state/memory", "state of run three"}, WorkspaceDir: newWorkspace(t),
		Attribution: port.Attribution{BillingAccountID: "acct-hib"},
		Mounts:      []port.Mount{{Source: openDir(t), Target: "/state", Writable: true}},
	}
	res3, err := sb2.RunFrom(ctx, h2, req3, sandbox.WithPrepare(func(ws string) error {
		b, err := os.ReadFile(filepath.Join(ws, "notes.txt"))
		if err != nil || string(b) != "written in segment one" {
			return fmt.Errorf("the restored workspace holds %q (%v)", b, err)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res3.Segments) != 2 || res3.Segments[1].ResumedFrom != h.ID || res3.Segments[1].RunID != req3.RunID {
		t.Errorf("RunFrom: segments %+v", res3.Segments)
	}
	// The run's state kept for the next turn (SaveRun), and run from again.
	h3, err := store.SaveRun(req3, res3, sandbox.HibernateOptions{Mounts: []string{"/state"}})
	if err != nil {
		t.Fatal(err)
	}
	res4, err := sb2.RunFrom(ctx, h3, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("hib-d"), Image: r.image,
		Argv: []string{"/agent", "cat", "/state/memory"}, WorkspaceDir: newWorkspace(t),
		Attribution: port.Attribution{BillingAccountID: "acct-hib"},
		Mounts:      []port.Mount{{Source: openDir(t), Target: "/state", Writable: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res4.Text != "state of run three" || len(res4.Segments) != 3 || res4.Segments[0].RunID != req.RunID || res4.Segments[2].ResumedFrom != h3.ID {
		t.Errorf("RunFrom a saved run: %q, segments %+v", res4.Text, res4.Segments)
	}
	// A segment's run id is its own.
	if _, err := sb2.RunFrom(ctx, h2, sandbox.Request{Grant: sandbox.Grant{AllowSandbox: true}, RunID: req.RunID, Image: r.image, WorkspaceDir: newWorkspace(t)}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("RunFrom with an earlier segment's run id: %v", err)
	}
	r.noSandbox(req2.RunID)
}

// assertNotInStore fails if any file of the store holds one of the canaries.
func assertNotInStore(t *testing.T, dir string, canaries ...string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, c := range canaries {
			if bytes.Contains(b, []byte(c)) {
				t.Errorf("%s holds %q", p, c)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("scanning the store: %d files, %v", files, err)
	}
}

func TestHibernateForkDocker(t *testing.T)     { testHibernateFork(t, dockerRunner) }
func TestHibernateForkContainerd(t *testing.T) { testHibernateFork(t, containerdRunner) }

// testHibernateFork: three sessions resumed from one hibernation, concurrently, each
// with its own run ID, account, budget and copy of the state. Each writes a canary
// into its workspace and its state mount after all have started; none sees another's,
// each sees the parent's; their calls are billed to their own accounts and their
// budgets are their own. About 10 s per runtime.
func testHibernateFork(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newHibernateRig(t, newRunner)
	store := r.store
	parent, err := r.sb.Start(ctx, r.request("fork-parent", "acct-parent"))
	if err != nil {
		t.Fatal(err)
	}
	r.exec(parent, "/agent", "write", "/workspace/parent", "PARENT")
	h, _ := r.hibernate(parent)

	const n = 3
	forks := make([]*sandbox.Session, n)
	reqs := make([]sandbox.SessionRequest, n)
	for i := range forks {
		reqs[i] = r.request("fork", "acct-fork-"+string(rune('a'+i)))
		reqs[i].Budget = port.Budget{MaxCalls: i + 1}
		if forks[i], err = r.sb.Resume(ctx, h, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	canary := func(i int) string { return "CANARY-FORK-" + string(rune('A'+i)) }
	for i, f := range forks {
		r.exec(f, "/agent", "write", "/workspace/canary-"+string(rune('a'+i)), canary(i))
		r.exec(f, "/agent", "write", "/state/canary-"+string(rune('a'+i)), canary(i))
		r.exec(f, "/agent", "write", "/workspace/parent", "CHANGED-BY-"+canary(i))
	}
	for i, f := range forks {
		if got := r.exec(f, "/agent", "cat", "/workspace/parent"); got != "CHANGED-BY-"+canary(i) {
			t.Errorf("fork %d reads its parent file as %q", i, got)
		}
		for j := range forks {
			for _, dir := range []string{"/workspace", "/state"} {
				p := dir + "/canary-" + string(rune('a'+j))
				res, err := f.Exec(ctx, port.ExecSpec{Argv: []string{"/agent", "cat", p}})
				if err != nil {
					t.Fatal(err)
				}
				seen := res.ExitCode == 0
				if seen != (i == j) {
					t.Errorf("fork %d sees %s: %v (%s)", i, p, seen, res.Stdout)
				}
			}
		}
		// Fork i has a budget of i+1 calls.
		out := r.exec(f, "/agent", "calls", "3", "gpt-4o-mini")
		if got := strings.Count(out, "status 200"); got != i+1 {
			t.Errorf("fork %d made %d calls under a budget of %d", i, got, i+1)
		}
	}
	for i, f := range forks {
		res, err := f.Stop(ctx, time.Second)
		if err != nil && !errors.Is(err, port.ErrBudgetExceeded) {
			t.Fatal(err)
		}
		last := res.Segments[len(res.Segments)-1]
		if len(res.Segments) != 2 || last.RunID != reqs[i].RunID || last.BillingAccountID != reqs[i].Attribution.BillingAccountID {
			t.Errorf("fork %d segments %+v", i, res.Segments)
		}
		if last.Usage == nil || last.Usage.Total.Calls != i+1 {
			t.Errorf("fork %d usage %+v", i, last.Usage)
		}
	}
	// The store's copy is untouched by the forks.
	again, err := store.Open(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.sb.RunFrom(ctx, again, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("fork-check"), Image: r.image,
		Argv: []string{"/agent", "cat", "/workspace/parent"}, WorkspaceDir: newWorkspace(t),
		Attribution: port.Attribution{BillingAccountID: "acct-check"},
		Mounts:      []port.Mount{{Source: openDir(t), Target: "/state", Writable: true}},
	})
	if err != nil || res.Text != "PARENT" {
		t.Fatalf("the hibernation after the forks: %+v %v", res, err)
	}
}

func TestHibernateHostileStateDocker(t *testing.T) { testHibernateHostileState(t, dockerRunner) }
func TestHibernateHostileStateContainerd(t *testing.T) {
	testHibernateHostileState(t, containerdRunner)
}

// testHibernateHostileState: a saved state changed in the store is refused on the
// way back, before any sandbox starts: a stream changed without its digest
// (ErrDigestMismatch), and streams with a symbolic link out, a hard link, a FIFO, a
// device, a name with "..", and a file over the store's limit, each with its digest
// rewritten as an attacker with the store's write access would. The workspace is
// left empty and nothing of the run exists. About 5 s per runtime.
func testHibernateHostileState(t *testing.T, newRunner func(testing.TB, string) (port.SandboxRunner, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newHibernateRig(t, newRunner, sandbox.WithStateLimits(sandbox.StateLimits{MaxFileBytes: 1 << 20}))
	store := r.store
	sess, err := r.sb.Start(ctx, r.request("hostile", "acct-hostile"))
	if err != nil {
		t.Fatal(err)
	}
	r.exec(sess, "/agent", "write", "/workspace/ok", "fine")
	h, _ := r.hibernate(sess)
	dir := filepath.Join(store.Dir(), h.ID)
	orig, err := os.ReadFile(filepath.Join(dir, "workspace.tar"))
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for name, c := range map[string]struct {
		hdr       tar.Header
		data      string
		keepSum   bool
		wantState bool
	}{
		"changed without its digest": {hdr: tar.Header{Typeflag: tar.TypeReg, Name: "extra", Size: 1}, data: "x", keepSum: true},
		"symlink out":                {hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "out", Linkname: outside}, wantState: true},
		"hard link":                  {hdr: tar.Header{Typeflag: tar.TypeLink, Name: "hard", Linkname: "ok"}, wantState: true},
		"fifo":                       {hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe"}, wantState: true},
		"device":                     {hdr: tar.Header{Typeflag: tar.TypeChar, Name: "mem", Devmajor: 1, Devminor: 1}, wantState: true},
		"dot dot":                    {hdr: tar.Header{Typeflag: tar.TypeReg, Name: "../../escape", Size: 1}, data: "x", wantState: true},
		"huge file":                  {hdr: tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: 2 << 20}, data: strings.Repeat("h", 2<<20), wantState: true},
	} {
		t.Run(name, func(t *testing.T) {
			tampered := appendEntry(t, orig, c.hdr, c.data)
			if err := os.WriteFile(filepath.Join(dir, "workspace.tar"), tampered, 0o600); err != nil {
				t.Fatal(err)
			}
			if !c.keepSum {
				rewriteDigest(t, dir, tampered)
			}
			t.Cleanup(func() {
				_ = os.WriteFile(filepath.Join(dir, "workspace.tar"), orig, 0o600)
				rewriteDigest(t, dir, orig)
			})
			hh, err := store.Open(h.ID)
			if err != nil {
				t.Fatal(err)
			}
			req := r.request("hostile-resume", "acct-hostile")
			_, err = r.sb.Resume(ctx, hh, req)
			var se *sandbox.StateError
			switch {
			case c.wantState && (!errors.As(err, &se) || !errors.Is(err, port.ErrInvalidSpec)):
				t.Errorf("Resume: %v, want a *sandbox.StateError", err)
			case !c.wantState && !errors.Is(err, port.ErrDigestMismatch):
				t.Errorf("Resume: %v, want ErrDigestMismatch", err)
			}
			if left, _ := os.ReadDir(req.WorkspaceDir); len(left) != 0 {
				t.Errorf("the refused state left %d entries in the workspace", len(left))
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("written outside: %v", ents)
			}
			r.noSandbox(req.RunID)
		})
	}
}

// appendEntry returns the tar stream orig with one more entry before its end.
func appendEntry(t *testing.T, orig []byte, h tar.Header, data string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(orig))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		b := new(bytes.Buffer)
		if _, err := b.ReadFrom(tr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if h.Mode == 0 {
		h.Mode = 0o644
	}
	if err := tw.WriteHeader(&h); err != nil {
		t.Fatal(err)
	}
	if data != "" {
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// rewriteDigest sets the workspace tree's SHA-256 in the manifest to data's.
func rewriteDigest(t *testing.T, dir string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	trees := m["trees"].([]any)
	trees[0].(map[string]any)["sha256"] = hex.EncodeToString(sum[:])
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHibernateAcrossRuntimes: a session hibernated on Docker resumes on containerd
// from the same store, as another host reaching the store would (its own runner,
// proxies and Sandbox), with its workspace and state mount.
func TestHibernateAcrossRuntimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	onDocker := newHibernateRig(t, dockerRunner)
	fake, store := onDocker.fake, onDocker.store
	sess, err := onDocker.sb.Start(ctx, onDocker.request("across-docker", "acct-across"))
	if err != nil {
		t.Fatal(err)
	}
	onDocker.exec(sess, "/agent", "write", "/workspace/notes.txt", "from docker")
	onDocker.exec(sess, "/agent", "write", "/state/memory", "docker state")
	h, _ := onDocker.hibernate(sess)

	onContainerd := hibernateRigOn(t, containerdRunner, fake, store)
	hh, err := store.Open(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	req := onContainerd.request("across-ctr", "acct-across")
	sess2, err := onContainerd.sb.Resume(ctx, hh, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := onContainerd.exec(sess2, "/agent", "cat", "/workspace/notes.txt"); got != "from docker" {
		t.Errorf("workspace on containerd: %q", got)
	}
	if got := onContainerd.exec(sess2, "/agent", "cat", "/state/memory"); got != "docker state" {
		t.Errorf("state on containerd: %q", got)
	}
	res, err := sess2.Stop(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Segments) != 2 || res.Segments[0].RunID != sess.RunID() || res.Segments[1].RunID != req.RunID {
		t.Errorf("segments %+v", res.Segments)
	}
}
