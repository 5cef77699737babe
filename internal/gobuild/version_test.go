package gobuild

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionKey(t *testing.T) {
	released := &debug.Module{Path: modulePath, Version: "v1.4.0", Sum: "h1:abc="}
	for name, c := range map[string]struct {
		bi   *debug.BuildInfo
		want string // a prefix; "" for none
	}{
		"a dependency at a version":  {&debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"}, Deps: []*debug.Module{released}}, "v1.4.0-"},
		"installed at a version":     {&debug.BuildInfo{Main: *released}, "v1.4.0-"},
		"this repository":            {&debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, ""},
		"replaced by a checkout":     {&debug.BuildInfo{Deps: []*debug.Module{{Path: modulePath, Version: "v1.4.0", Sum: "h1:abc=", Replace: &debug.Module{Path: "../sandbox"}}}}, ""},
		"no checksum (workspace)":    {&debug.BuildInfo{Deps: []*debug.Module{{Path: modulePath, Version: "v1.4.0"}}}, ""},
		"no build information":       {nil, ""},
		"another module of the name": {&debug.BuildInfo{Deps: []*debug.Module{{Path: modulePath + "/v2", Version: "v2.0.0", Sum: "h1:x="}}}, ""},
	} {
		got := versionKey(c.bi)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want prefix %q", name, got, c.want)
		}
	}
	other := versionKey(&debug.BuildInfo{Deps: []*debug.Module{{Path: modulePath, Version: "v1.4.0", Sum: "h1:other="}}})
	if other == versionKey(&debug.BuildInfo{Main: *released}) {
		t.Error("two checksums of one version give one key")
	}
	if got := safeVersion("v1.4.0-rc.1+meta/x"); got != "v1.4.0-rc.1+meta_x" {
		t.Errorf("safeVersion = %q", got)
	}
}

// With a released version, a cached binary is found by name alone: no go command
// runs (PATH has none), as on a host without a toolchain whose cache was seeded.
func TestCachedByVersionNeedsNoToolchain(t *testing.T) {
	saved := buildInfo
	defer func() { buildInfo = saved; ForgetCached() }()
	buildInfo = func() *debug.BuildInfo {
		return &debug.BuildInfo{Deps: []*debug.Module{{Path: modulePath, Version: "v9.9.9", Sum: "h1:seeded="}}}
	}
	dir := t.TempDir()
	seeded := filepath.Join(dir, "sandbox-bridge-"+versionKey(buildInfo()))
	if err := os.WriteFile(seeded, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	ForgetCached()
	got, err := Cached(context.Background(), modulePath+"/cmd/sandbox-bridge", "sandbox-bridge", dir)
	if err != nil || got != seeded {
		t.Fatalf("Cached = %q, %v; want the seeded %s without the go command", got, err, seeded)
	}
	// Not seeded: building needs the go command, and says so.
	ForgetCached()
	if _, err := Cached(context.Background(), modulePath+"/cmd/sandbox-bridge", "other", dir); err == nil || !strings.Contains(err.Error(), "go command") {
		t.Errorf("unseeded without a toolchain: %v", err)
	}
}
