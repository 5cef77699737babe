package proxydaemon_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// dialAs connects to a unix socket with this thread's effective uid set to uid
// (SO_PEERCRED records the connecting thread's credentials), then restores it.
// It reports whether the proxy answered /health on that connection.
func dialAs(t *testing.T, uid int, sock string) bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() {
		runtime.LockOSThread() // left locked if the uid cannot be restored: the thread then dies with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			t.Errorf("setresuid: %v", e)
			done <- false
			return
		}
		c, err := net.Dial("unix", sock)
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
			t.Errorf("restore uid: %v", e)
			done <- false
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			done <- false
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
		b := make([]byte, 64)
		n, _ := c.Read(b)
		done <- strings.HasPrefix(string(b[:n]), "HTTP/1.1 200")
	}()
	return <-done
}

// TestRunSocketLeastPrivilege: a run's socket and token file belong to the
// sandbox's uid (mode 0600 and 0400); another uid cannot connect. A run
// registered without a sandbox uid answers only the daemon's own uid, not any
// host user.
func TestRunSocketLeastPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as other uids")
	}
	up := litellmtest.NewServer()
	defer up.Close()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o711); err != nil { // other uids may traverse to the socket
		t.Fatal(err)
	}
	// So must every directory above it, or no uid but root could be served at all.
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("%s is not traversable by other uids (%v): run the test under a TMPDIR they can reach", p, fi.Mode().Perm())
		}
	}
	d := startDaemon(t, dir, nil)
	uid := 1001
	withUID := register(t, d, up, "run-uid", func(r *api.RegisterRequest) { r.SandboxUID = &uid })
	noUID := register(t, d, up, "run-nouid", nil)
	for _, c := range []struct {
		reg       api.Registered
		owner     int
		tok, sock os.FileMode
		sandbox   bool // uid 1001 may connect
	}{{withUID, 1001, 0o400, 0o600, true}, {noUID, 0, 0o400, 0o600, false}} {
		for _, f := range []struct {
			path string
			mode os.FileMode
		}{{filepath.Join(c.reg.SocketDir, bridgeapi.TokenFile), c.tok}, {c.reg.SocketPath, c.sock}} {
			fi, err := os.Lstat(f.path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != f.mode || int(st.Uid) != c.owner {
				t.Errorf("%s: mode %v owner %d, want %v owner %d", f.path, fi.Mode().Perm(), st.Uid, f.mode, c.owner)
			}
		}
		if got := dialAs(t, 1001, c.reg.SocketPath); got != c.sandbox {
			t.Errorf("%s: uid 1001 served = %v, want %v", c.reg.RunID, got, c.sandbox)
		}
		if dialAs(t, 1002, c.reg.SocketPath) {
			t.Errorf("%s: another uid (1002) was served", c.reg.RunID)
		}
		// The daemon's own uid (the host) is served.
		resp, err := runClient(c.reg.SocketPath, c.reg.Token).Get("http://sandbox/health")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: the daemon's uid: %v %v", c.reg.RunID, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	_ = context.Background()
}
