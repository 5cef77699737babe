package main

import (
	"bytes"
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
