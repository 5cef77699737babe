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

func TestReadOnly(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "-mod=readonly",
		"-mod=mod":                   "-mod=readonly",
		"-buildvcs=false --mod=mod":  "-buildvcs=false -mod=readonly",
		" -trimpath  -mod=vendor -x": "-trimpath -x -mod=readonly",
	} {
		if got := readOnly(in); got != want {
			t.Errorf("readOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// A caller's -mod=mod must leave this module's go.mod as it is.
func TestBuildLeavesThisModuleAlone(t *testing.T) {
	gomod := filepath.Join(ModuleDir(), "go.mod")
	before, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOFLAGS", "-mod=mod")
	if _, err := StaticBytes(context.Background(), ModuleDir(), "github.com/agentsandbox/sandbox/cmd/sandbox-bridge"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(gomod)
	if string(before) != string(after) {
		os.WriteFile(gomod, before, 0o644)
		t.Fatalf("the build rewrote go.mod:\n%s", after)
	}
}
