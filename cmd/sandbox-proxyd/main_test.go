package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressFlags: bad egress settings stop the daemon before it serves, with a
// message naming the problem.
func TestEgressFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-state-dir", filepath.Join(dir, "s"), "-socket-dir", filepath.Join(dir, "r"), "-admin-socket", filepath.Join(dir, "a.sock")}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"prefix":        {[]string{"-egress-unsafe-allow", "127.0.0.1"}, 2, "not an address prefix"},
		"roots":         {[]string{"-egress-upstream-roots", notPEM}, 2, "holds no PEM certificate"},
		"missing roots": {[]string{"-egress-upstream-roots", filepath.Join(dir, "none.pem")}, 2, "no such file"},
		"proxy":         {[]string{"-egress-upstream-proxy", "socks5://127.0.0.1:1080"}, 2, "egress"},
	} {
		var stderr bytes.Buffer
		if code := run(append(append([]string{}, base...), tc.args...), &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestUpstreamKeyFile: the key file is read at each call (a rotated Secret takes
// effect), trimmed, and refused when empty, binary, missing, or accessible by anyone
// but its owner, without its content in the error.
func TestUpstreamKeyFile(t *testing.T) {
	if upstreamKey("") != nil {
		t.Fatal("no file should mean no daemon-held key")
	}
	f := filepath.Join(t.TempDir(), "key")
	read := upstreamKey(f)
	if _, err := read(); err == nil {
		t.Error("a missing file gave a key")
	}
	for content, want := range map[string]string{"sk-one\n": "sk-one", "sk-two": "sk-two"} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err != nil || k != want {
			t.Errorf("%q: %q %v", content, k, err)
		}
	}
	// As ssh does: a key file someone else may read or write is refused, naming
	// the file and its mode, never the key.
	if err := os.WriteFile(f, []byte("sk-secret-world"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o660} {
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode)) || strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("mode %04o: %q %v", mode, k, err)
		}
	}
	if err := os.Chmod(f, 0o400); err != nil {
		t.Fatal(err)
	}
	if k, err := read(); err != nil || k != "sk-secret-world" {
		t.Errorf("mode 0400: %q %v", k, err)
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"\n", "sk-with space-secret", "sk-\x00secret"} {
		if err := os.WriteFile(f, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := read(); err == nil || strings.Contains(err.Error(), "secret") && !strings.Contains(f, "secret") {
			t.Errorf("%q: %q %v", bad, k, err)
		}
	}
}
