package statearchive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "a/b"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "a/b/f.txt"), []byte("hello"), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "top"), []byte("x"), 0o4755)) // setuid bit dropped
	must(t, os.Chmod(filepath.Join(src, "top"), 0o4755))
	must(t, os.WriteFile(filepath.Join(src, "secret.key"), []byte("k"), 0o600))
	must(t, os.MkdirAll(filepath.Join(src, "agents/main/agent"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "agents/main/agent/auth-profiles.json"), []byte("key"), 0o600))
	must(t, os.MkdirAll(filepath.Join(src, "cache/x"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "cache/x/big"), []byte("cached"), 0o644))
	must(t, os.Symlink("/etc/passwd", filepath.Join(src, "link")))
	must(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "a/b/f.txt"), old, old))

	var buf bytes.Buffer
	rep, err := Write(&buf, src, []string{"secret.key", "/cache/", "agents/*/agent/auth-profiles.json"}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 2 || rep.Dirs != 5 || rep.Bytes != 6 || rep.SkippedCount != 2 {
		t.Errorf("write report %+v", rep)
	}
	if got := strings.Join(rep.Skipped, ","); got != "fifo (a FIFO),link (a symbolic link)" {
		t.Errorf("skipped %q", got)
	}
	dst := t.TempDir()
	back, err := Extract(bytes.NewReader(buf.Bytes()), dst, Owner{UID: -1}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Files != 2 || back.Dirs != 5 || back.Bytes != 6 {
		t.Errorf("extract report %+v", back)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a/b/f.txt")); err != nil || string(b) != "hello" {
		t.Errorf("f.txt: %q %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dst, "a/b/f.txt"))
	if err != nil || fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(old) {
		t.Errorf("f.txt mode %v time %v (%v)", fi.Mode(), fi.ModTime(), err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "top")); err != nil || fi.Mode()&fs.ModeSetuid != 0 {
		t.Errorf("top: %v %v", fi.Mode(), err)
	}
	for _, gone := range []string{"secret.key", "cache", "link", "fifo", "agents/main/agent/auth-profiles.json"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s restored (%v)", gone, err)
		}
	}
}

func TestExtractOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "d/f"), []byte("x"), 0o644))
	var buf bytes.Buffer
	if _, err := Write(&buf, src, nil, Limits{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := Extract(&buf, dst, Owner{UID: 1001, GID: 1002}, Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"d", "d/f"} {
		fi, err := os.Lstat(filepath.Join(dst, n))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1001 || st.Gid != 1002 {
			t.Errorf("%s owned by %d:%d", n, st.Uid, st.Gid)
		}
	}
}

// entry is one header of a hand-made (hostile) stream.
type entry struct {
	h    tar.Header
	data string
}

func stream(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.h
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		if e.data != "" {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	must(t, tw.Close())
	return buf.Bytes()
}

func reg(name, data string) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name}, data: data}
}

func TestExtractRefusesHostileStreams(t *testing.T) {
	outside := t.TempDir()
	huge := tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: 1 << 40}
	small := Limits{MaxBytes: 100, MaxFileBytes: 50, MaxEntries: 5, MaxDepth: 4}
	cases := map[string]struct {
		raw []byte
		lim Limits
	}{
		"symlink":        {raw: stream(t, entry{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: outside}})},
		"hard link":      {raw: stream(t, reg("a", "x"), entry{h: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "a"}})},
		"fifo":           {raw: stream(t, entry{h: tar.Header{Typeflag: tar.TypeFifo, Name: "p"}})},
		"char device":    {raw: stream(t, entry{h: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}})},
		"block device":   {raw: stream(t, entry{h: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}})},
		"dot dot":        {raw: stream(t, reg("../escape", "x"))},
		"dot dot inside": {raw: stream(t, reg("a/../../escape", "x"))},
		"absolute":       {raw: stream(t, reg(outside+"/abs", "x"))},
		"twice":          {raw: stream(t, reg("f", "x"), reg("f", "y"))},
		"file over dir":  {raw: stream(t, entry{h: tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755}}, reg("d", "x"))},
		"under a file":   {raw: stream(t, reg("f", "x"), reg("f/g", "y"))},
		"huge header":    {raw: hugeHeader(t, huge)},
		"file over cap":  {raw: stream(t, reg("f", strings.Repeat("x", 51))), lim: small},
		"total over cap": {raw: stream(t, reg("a", strings.Repeat("x", 40)), reg("b", strings.Repeat("x", 40)), reg("c", strings.Repeat("x", 40))), lim: small},
		"too many":       {raw: stream(t, reg("1", ""), reg("2", ""), reg("3", ""), reg("4", ""), reg("5", ""), reg("6", "")), lim: small},
		"too deep":       {raw: stream(t, reg("a/b/c/d/e", "x")), lim: small},
		"garbage":        {raw: []byte(strings.Repeat("not a tar stream ", 64))},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			_, err := Extract(bytes.NewReader(c.raw), dst, Owner{UID: -1}, c.lim)
			var se *Error
			if !errors.As(err, &se) || !errors.Is(err, port.ErrInvalidSpec) {
				t.Fatalf("Extract: %v, want a *statearchive.Error", err)
			}
			t.Log(err)
			left, _ := os.ReadDir(dst)
			if len(left) != 0 {
				t.Errorf("a refused stream left %d entries behind", len(left))
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("something was written outside: %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(dst), "escape")); err == nil {
				t.Error("an entry escaped the directory")
			}
		})
	}
}

// hugeHeader is a stream whose only header claims a file of h.Size bytes, with no
// data after it (the refusal must come from the header, before any read).
func hugeHeader(t *testing.T, h tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&h))
	return buf.Bytes() // no data, no trailer
}

func TestExtractIntoNonEmptyRefused(t *testing.T) {
	dst := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dst, "already"), nil, 0o644))
	_, err := Extract(bytes.NewReader(stream(t, reg("f", "x"))), dst, Owner{UID: -1}, Limits{})
	if !errors.Is(err, port.ErrInvalidSpec) {
		t.Fatalf("Extract into a non-empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "already")); err != nil {
		t.Error("the directory's own content was removed")
	}
}

func TestWriteRefusesOverLimits(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "big"), bytes.Repeat([]byte("x"), 100), 0o644))
	var buf bytes.Buffer
	if _, err := Write(&buf, src, nil, Limits{MaxFileBytes: 50}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a file over the per-file limit: %v", err)
	}
	deep := filepath.Join(src, "a/b/c/d/e")
	must(t, os.MkdirAll(deep, 0o755))
	if _, err := Write(&buf, src, []string{"big"}, Limits{MaxDepth: 3}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a tree over the depth limit: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
