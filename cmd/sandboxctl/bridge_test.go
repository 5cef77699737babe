package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bridge seeds a cache directory with the bridge and prints where it is.
func TestBridgeSeedsTheCache(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := ctl(t, "bridge", "--dir", dir)
	p := strings.TrimSpace(out)
	if code != exitOK || filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), "sandbox-bridge-") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errs)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 || fi.Size() < 1<<20 {
		t.Errorf("the bridge: %v %v", fi, err)
	}
	if code, _, _ := ctl(t, "bridge", "extra"); code != exitUsage {
		t.Errorf("an argument: exit %d", code)
	}
}
