package main

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exported decodes exportDir's lines: the archive's entries (name to content, "/" for
// a directory) and the last line.
func exported(t *testing.T, out string) (map[string]string, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var archive []byte
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "!") || len(l) > 1+base64.StdEncoding.EncodedLen(exportFrameMax) {
			t.Fatalf("not an export frame: %.40q", l)
		}
		b, err := base64.StdEncoding.DecodeString(l[1:])
		if err != nil {
			t.Fatal(err)
		}
		archive = append(archive, b...)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF || err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeDir {
			got[h.Name] = "/"
		} else {
			got[h.Name] = string(b)
		}
	}
	return got, lines[len(lines)-1]
}

// TestExportDir: regular files and directories come back as an archive in export
// frames ended by "!end"; links are left out (never followed); past the byte or file
// limit the export ends with "!over", never with "!end". (The file made unreadable is
// read all the same here because tests run as root; the init's chmod path for the
// sandbox's own user is not exercised.)
func TestExportDir(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", 3*exportFrameMax+5)
	outside := filepath.Join(t.TempDir(), "secret")
	for p, c := range map[string]string{"a.txt": "A", "sub/b.bin": big, "sub/locked": "L"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sub", "locked"), 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exportDir(dir, &out, 1<<20, 10)
	got, last := exported(t, out.String())
	want := map[string]string{"a.txt": "A", "sub/": "/", "sub/b.bin": big, "sub/locked": "L"}
	if last != "!end" || len(got) != len(want) {
		t.Fatalf("exported %d entries %v, last line %q", len(got), keys(got), last)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	for _, lim := range []struct {
		bytes int64
		files int
	}{{4 << 10, 10}, {1 << 20, 2}} {
		out.Reset()
		exportDir(dir, &out, lim.bytes, lim.files)
		if _, last := exported(t, out.String()); !strings.HasPrefix(last, "!over ") {
			t.Errorf("limits %+v: last line %q, want !over", lim, last)
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
