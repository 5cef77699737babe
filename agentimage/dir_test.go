package agentimage

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
)

func TestDirPacksTheTree(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "lib", "deep"), 0o750))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "lib", "deep", "data.json"), []byte("{}"), 0o640))
	must(os.Symlink("../run.sh", filepath.Join(src, "lib", "run")))
	must(os.Chmod(filepath.Join(src, "lib", "deep"), 0o750))

	files, err := Dir(src, "/opt/app")
	if err != nil {
		t.Fatal(err)
	}
	img := Static("example.com/app", []byte("bin"))
	img.Files = append(img.Files, File{Path: "/opt", Mode: 0o755, Dir: true})
	img.Files = append(img.Files, files...)
	_, archive, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	_, top := entries(t, archive)
	var layerName string
	for name := range top {
		if filepath.Base(name) == "layer.tar" {
			layerName = name
		}
	}
	layer, content := entries(t, top[layerName])
	for name, want := range map[string]struct {
		mode int64
		link string
	}{
		"opt/app/":                   {0o700&^0o077 | dirMode(t, src), ""},
		"opt/app/run.sh":             {0o755, ""},
		"opt/app/lib/":               {0o750, ""},
		"opt/app/lib/deep/":          {0o750, ""},
		"opt/app/lib/deep/data.json": {0o640, ""},
		"opt/app/lib/run":            {0o777, "../run.sh"},
	} {
		h, ok := layer[name]
		if !ok {
			t.Errorf("layer lacks %s", name)
			continue
		}
		if h.Mode != want.mode || h.Linkname != want.link || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mode %o link %q owner %d:%d, want %o %q root", name, h.Mode, h.Linkname, h.Uid, h.Gid, want.mode, want.link)
		}
	}
	if string(content["opt/app/lib/deep/data.json"]) != "{}" {
		t.Errorf("data.json = %q", content["opt/app/lib/deep/data.json"])
	}
}

func dirMode(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int64(fi.Mode().Perm())
}

func TestDirRefusesWhatAnImageCannotHold(t *testing.T) {
	if _, err := Dir(t.TempDir(), "relative"); !errors.Is(err, errdefs.ErrInvalidSpec) {
		t.Errorf("relative target: err = %v", err)
	}
	src := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Dir(src, "/app"); !errors.Is(err, errdefs.ErrInvalidSpec) {
		t.Errorf("a socket in the tree: err = %v", err)
	}
	if _, err := Dir(filepath.Join(src, "missing"), "/app"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing source: err = %v", err)
	}
}
