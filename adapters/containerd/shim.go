package containerd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"

	"github.com/agentsandbox/sandbox/port"
)

// shimProc is a running containerd shim process (containerd-shim-*-v2) serving one
// container of a namespace, as its command line names them.
type shimProc struct {
	pid int
	ns  string
	id  string
}

// procRoot is where shim processes are found (a variable for tests).
var procRoot = "/proc"

// listShims returns the shim processes of namespace ns whose container ID starts with
// idPrefix. A shim's command line is containerd's (-namespace NS -id ID -address ...),
// whoever can read /proc sees it; the daemon is local (its socket is a unix socket).
func listShims(ns, idPrefix string) []shimProc {
	dirs, _ := filepath.Glob(filepath.Join(procRoot, "[0-9]*"))
	var out []shimProc
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte("containerd-shim")) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		var s shimProc
		for i := 1; i+1 < len(args); i++ {
			switch args[i] {
			case "-namespace":
				s.ns = args[i+1]
			case "-id":
				s.id = args[i+1]
			}
		}
		if s.ns != ns || s.id == "" || !strings.HasPrefix(s.id, idPrefix) {
			continue
		}
		if s.pid, err = strconv.Atoi(filepath.Base(d)); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// ShimStateRoot is where containerd keeps the bundle of each task's shim (one
// directory per namespace and container ID: the OCI spec, the shim's socket address,
// the root file system's mount point).
const ShimStateRoot = "/run/containerd/io.containerd.runtime.v2.task"

// orphanShim is the task bundle (and shim, if one still runs) of one of the owner's
// sandboxes whose container containerd no longer has: a host died while making the
// sandbox, and the daemon finished creating its task after a sweep had taken the
// container (or the create was cut short). No task or container names it any more,
// so only its process, bundle and runtime state are left.
type orphanShim struct {
	shimProc
	runID  string
	bundle string
	made   time.Time
}

// bundleOwner reads the owner and run annotations of a shim's bundle (see
// withOwnerAnnotations), and when the bundle was made.
func bundleOwner(bundle string) (owner, runID string, made time.Time, ok bool) {
	fi, err := os.Lstat(bundle)
	if err != nil || !fi.IsDir() {
		return "", "", time.Time{}, false
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil || len(b) > 4<<20 {
		return "", "", time.Time{}, false
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &spec) != nil {
		return "", "", time.Time{}, false
	}
	return spec.Annotations[port.LabelOwner], spec.Annotations[port.LabelRunID], fi.ModTime(), true
}

// ownerShims lists the task bundles of owner's sandboxes in namespace ns (as their
// annotations name them), with the shim process serving each (pid 0: none runs).
func ownerShims(ns, owner string) []orphanShim {
	procs := map[string]shimProc{}
	for _, p := range listShims(ns, "agentsandbox-") {
		procs[p.id] = p
	}
	dir := filepath.Join(ShimStateRoot, ns)
	ents, _ := os.ReadDir(dir)
	var out []orphanShim
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "agentsandbox-") {
			continue
		}
		bundle := filepath.Join(dir, e.Name())
		o, runID, made, ok := bundleOwner(bundle)
		if !ok || o != owner {
			continue
		}
		p, ok := procs[e.Name()]
		if !ok {
			p = shimProc{ns: ns, id: e.Name()}
		}
		out = append(out, orphanShim{shimProc: p, runID: runID, bundle: bundle, made: made})
	}
	return out
}

// orphanShims lists the runner's owner's task bundles (and their shims) whose
// container is gone.
func (r *Runner) orphanShims(ctx context.Context) ([]orphanShim, error) {
	var out []orphanShim
	for _, s := range ownerShims(r.cfg.namespace, r.cfg.owner) {
		_, err := r.cli.LoadContainer(ctx, s.id)
		if err == nil {
			continue // a container of ours: the container pass decides
		}
		if !errdefs.IsNotFound(err) {
			return out, classify(err)
		}
		out = append(out, s)
	}
	return out, nil
}

// endShim ends an orphan shim through its own API, as containerd would had it still
// known the task: kill the task's processes, delete the task (runc's state and the
// root file system's mount with it), shut the shim down; then the bundle is removed.
// A shim that does not answer is killed. address is containerd's socket.
func endShim(ctx context.Context, s orphanShim, address string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if s.pid > 0 {
		if err := shimAPI(ctx, s); err != nil {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
		for end := time.Now().Add(5 * time.Second); processAlive(s.pid) && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		if processAlive(s.pid) {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
		}
	}
	shimDelete(ctx, s, address)
	return removeBundle(s.bundle, s.ns, s.id)
}

// shimDelete runs the shim binary's own cleanup of a task whose shim is gone, as
// containerd does for a shim that died: it deletes the runtime's state of the task
// (runc's, say: what a task created but never deleted leaves) and unmounts the root
// file system. It runs in the bundle, which names the runtime and its options.
func shimDelete(ctx context.Context, s orphanShim, address string) {
	bin, err := os.ReadFile(filepath.Join(s.bundle, "shim-binary-path"))
	if err != nil || !filepath.IsAbs(string(bin)) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, string(bin), "-namespace", s.ns, "-address", address, "-id", s.id, "-bundle", s.bundle, "delete")
	cmd.Dir = s.bundle
	_ = cmd.Run()
}

// shimAPI asks the shim to kill, delete and shut down its task.
func shimAPI(ctx context.Context, s orphanShim) error {
	addr, err := os.ReadFile(filepath.Join(s.bundle, "address"))
	if err != nil {
		return err
	}
	sock, ok := strings.CutPrefix(strings.TrimSpace(string(addr)), "unix://")
	if !ok {
		return fmt.Errorf("shim address %q is not a unix socket", addr)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	tc := ttrpc.NewClient(conn)
	defer tc.Close()
	task := taskapi.NewTTRPCTaskClient(tc)
	_, _ = task.Kill(ctx, &taskapi.KillRequest{ID: s.id, Signal: uint32(syscall.SIGKILL), All: true})
	// The kill takes a moment to be seen: Delete refuses a running process.
	for {
		_, err = task.Delete(ctx, &taskapi.DeleteRequest{ID: s.id})
		if err == nil || errdefs.IsNotFound(errgrpc.ToNative(err)) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = task.Shutdown(ctx, &taskapi.ShutdownRequest{ID: s.id, Now: true})
	if err != nil && !errors.Is(err, ttrpc.ErrClosed) && !strings.Contains(err.Error(), "closed") {
		return err
	}
	return nil
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", procRoot, pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// removeBundle removes a shim's bundle and its work directory, as containerd does
// for the tasks it knows: the root file system's mount point (unmounted), then the
// directories. The work directory is removed only where containerd puts it (its name
// is the container's, under the namespace's directory).
func removeBundle(bundle, ns, id string) error {
	work, werr := os.Readlink(filepath.Join(bundle, "work"))
	rootfs := filepath.Join(bundle, "rootfs")
	if err := mount.UnmountRecursive(rootfs, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", rootfs, err)
	}
	if err := os.RemoveAll(bundle); err != nil {
		return err
	}
	if werr == nil && filepath.Base(work) == id && filepath.Base(filepath.Dir(work)) == ns {
		return os.RemoveAll(work)
	}
	return nil
}

// withOwnerAnnotations names the sandbox's owner and run in its OCI spec, which
// containerd writes into the shim's bundle before the task exists: a shim whose
// container is gone (a host died making it) is still attributable to its owner, and
// Sweep ends it (see orphanShims). The sandbox never sees its spec's annotations.
func withOwnerAnnotations(owner, runID string) oci.SpecOpts {
	return oci.WithAnnotations(map[string]string{port.LabelOwner: owner, port.LabelRunID: runID})
}
