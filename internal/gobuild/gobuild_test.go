package gobuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModuleDirIsThisModule(t *testing.T) {
	dir := ModuleDir()
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatalf("ModuleDir %q: %v", dir, err)
	}
	if !strings.HasPrefix(string(b), "module github.com/agentsandbox/sandbox\n") {
		t.Errorf("ModuleDir %q holds another module: %.60s", dir, b)
	}
}

func TestStaticBytesReportsTheCompilerError(t *testing.T) {
	_, err := StaticBytes(context.Background(), ModuleDir(), "github.com/agentsandbox/sandbox/no/such/package")
	if err == nil || !strings.Contains(err.Error(), "go build") || !strings.Contains(err.Error(), "no/such/package") {
		t.Errorf("err = %v, want the go command's message", err)
	}
}
