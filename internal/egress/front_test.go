package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// StartFront writes the bundle (the run's CA first, then the extra roots), serves the
// proxy on a 0666 socket through the wrapper, answers a denied host with the JSON
// denial, and keeps the audit after Stop, which removes the socket.
func TestStartFront(t *testing.T) {
	pol, err := Compile(&port.EgressPolicy{Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://api.test/"}}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A stale socket from a previous host is replaced.
	if err := os.WriteFile(filepath.Join(dir, port.EgressSocketName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	extra := []byte("-----BEGIN CERTIFICATE-----\nextra\n-----END CERTIFICATE-----\n")
	var wrapped atomic.Int32
	f, err := Host{RootsPEM: extra}.StartFront(FrontConfig{RunID: "run-1", Policy: pol, Dir: dir, Wrap: func(l net.Listener) net.Listener {
		wrapped.Add(1)
		return l
	}})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(filepath.Join(dir, port.EgressCAName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(bundle, f.Proxy().CAPEM()) || !bytes.Contains(bundle, extra) || bytes.Contains(bundle, []byte("PRIVATE KEY")) {
		t.Errorf("bundle: CA first %v, extra %v, no key %v", bytes.HasPrefix(bundle, f.Proxy().CAPEM()), bytes.Contains(bundle, extra), !bytes.Contains(bundle, []byte("PRIVATE KEY")))
	}
	sock := filepath.Join(dir, port.EgressSocketName)
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v %v", st, err)
	}
	if wrapped.Load() != 1 {
		t.Errorf("wrap called %d times", wrapped.Load())
	}
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		Proxy: http.ProxyURL(mustURL("http://proxy")),
	}}
	resp, err := c.Get("http://denied.test/x")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error struct{ Type, Guard string } }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || body.Error.Type != "egress_denied" || body.Error.Guard != port.GuardAllowlist {
		t.Errorf("denied host: %d %+v", resp.StatusCode, body)
	}
	c.CloseIdleConnections()
	f.Stop(context.Background())
	if a := f.Audit(); len(a) != 1 || a[0].RunID != "run-1" || a[0].Guard != port.GuardAllowlist {
		t.Errorf("audit after Stop: %+v", a)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket after Stop: %v", err)
	}
	// A directory that cannot take the bundle: an error, nothing listening.
	if _, err := (Host{}).StartFront(FrontConfig{RunID: "run-2", Policy: pol, Dir: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "bundle") {
		t.Errorf("missing dir: %v", err)
	}
}
