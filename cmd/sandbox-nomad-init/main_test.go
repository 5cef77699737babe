package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckUnwritable: a directory the init can create a file in is refused (and the
// probe file is not left there); one it cannot (here: missing) passes.
func TestCheckUnwritable(t *testing.T) {
	dir := t.TempDir()
	if err := checkUnwritable(dir); err == nil {
		t.Error("a writable directory passed")
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("the probe left %v", ents)
	}
	if err := checkUnwritable(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a directory nothing can be created in: %v", err)
	}
}
