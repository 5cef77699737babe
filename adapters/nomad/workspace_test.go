package nomad

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// TestWorkspaceCopy runs sandboxes whose workspace is copied into the cluster and back:
// the agent reads the input and its output lands in the host directory.
func TestWorkspaceCopy(t *testing.T) {
	e := setup(t)
	r := e.runner(t, WithWorkspaceCopy(true), WithHostPaths(false))
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "deep", "in.txt"), []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(argv ...string) *port.RunResult {
		t.Helper()
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("wscopy"), Image: e.image, Argv: append([]string{"/agent"}, argv...), WorkspaceDir: dir})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("RunOnce %v: %v %+v", argv, err, res)
		}
		return res
	}
	if res := run("cat", "/workspace/sub/deep/in.txt"); string(res.Stdout) != "from-host" {
		t.Errorf("the sandbox read %q", res.Stdout)
	}
	run("write", "/workspace/sub/out.txt", "from-sandbox")
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "out.txt")); err != nil || string(b) != "from-sandbox" {
		t.Errorf("the host sees %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "deep", "in.txt")); string(b) != "from-host" {
		t.Errorf("the input changed: %q", b)
	}
	// Host paths are off: a mount is refused, not silently dropped.
	_, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("wscopy"), Image: e.image, Argv: []string{"/agent", "id"},
		Mounts: []port.Mount{{Source: dir, Target: "/data"}}})
	if !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("a host mount with host paths off: %v, want ErrUnsupported", err)
	}
}

// TestPackWorkspaceSkipsLinks: a link in the host workspace, even to a file outside,
// is not packed; the size limit holds.
func TestPackWorkspaceSkipsLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("aaaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := packWorkspace(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		data, _ := io.ReadAll(tr)
		if strings.Contains(string(data), "host secret") {
			t.Errorf("%s carries the linked file's content", h.Name)
		}
	}
	if strings.Join(names, ",") != "a.txt" {
		t.Errorf("packed %v, want only a.txt", names)
	}
	if _, err := packWorkspace(dir, 3); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("over the limit: %v", err)
	}
}

// fakeFiles is an allocation's file system as the API lists it.
type fakeFiles map[string][]*api.AllocFileInfo

func (f fakeFiles) List(_ context.Context, p string) ([]*api.AllocFileInfo, error) { return f[p], nil }
func (f fakeFiles) Read(_ context.Context, p string, limit int64) ([]byte, error) {
	return []byte("content of " + path.Base(p)), nil
}

// TestCopyBackIsSymlinkSafe: links the agent made are not copied, odd names are
// refused, and a link already in the host directory is replaced, not written through.
func TestCopyBackIsSymlinkSafe(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out.txt")); err != nil {
		t.Fatal(err)
	}
	files := fakeFiles{
		workspaceFSPath: {
			{Name: "out.txt", FileMode: "-rw-r--r--", Size: 20},
			{Name: "evil", FileMode: "Lrwxrwxrwx", Size: 11},
			{Name: "d", IsDir: true, FileMode: "drwxr-xr-x"},
		},
		workspaceFSPath + "/d": {{Name: "f", FileMode: "-rw-r--r--", Size: 10}},
	}
	if err := copyBack(context.Background(), files, dir, 1<<20, 10); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("the copy wrote through a host link: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "content of out.txt" {
		t.Errorf("out.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "d", "f")); string(b) != "content of f" {
		t.Errorf("d/f = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "evil")); !os.IsNotExist(err) {
		t.Errorf("the agent's link was copied: %v", err)
	}
	bad := fakeFiles{workspaceFSPath: {{Name: "../x", FileMode: "-rw-r--r--"}}}
	if err := copyBack(context.Background(), bad, dir, 1<<20, 10); err == nil {
		t.Error("a name with a slash was accepted")
	}
	if err := copyBack(context.Background(), files, dir, 1<<20, 1); err == nil {
		t.Error("the file count limit did not hold")
	}
}

// TestSplitExport: the init's export frames are taken out of stderr (the output's
// frames around them decode as before, and never show them), the archive they carry
// is copied back like the file system it replaces, and an export that did not end,
// or ended over its limits, is an error.
func TestSplitExport(t *testing.T) {
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("out"))
	_ = tw.Close()
	frame := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) + "\n" }
	a := archive.Bytes()
	stderr := frame([]byte("err1")) + "!" + frame(a[:700]) + "!" + frame(a[700:]) + frame([]byte("err2")) + "!end\n"
	rest, got, err := splitExport([]byte(stderr))
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("split: %v, archive equal %v", err, bytes.Equal(got, a))
	}
	if dec, _ := unframe(rest); string(dec) != "err1err2" {
		t.Errorf("stderr without the export = %q", dec)
	}
	if dec, _ := unframe([]byte(stderr)); string(dec) != "err1err2" {
		t.Errorf("the live view shows the export: %q", dec)
	}
	files, err := newTarFiles(got)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := copyBack(context.Background(), files, dir, 1<<20, 10); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "d", "f")); err != nil || string(b) != "out" {
		t.Errorf("d/f = %q, %v", b, err)
	}
	for _, bad := range []string{"!" + frame(a), "!" + frame(a) + "!over too big\n", "!" + frame(a) + "!failed disk\n"} {
		if _, _, err := splitExport([]byte(bad)); err == nil {
			t.Errorf("%.30q...: no error", bad)
		}
	}
}
