package agentimage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSourceIsData: a file read from its Source packs exactly as the same bytes in
// Data, and Ref, WriteTo, Open and Archive agree.
func TestSourceIsData(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("\x7fELF from disk"), 0o755); err != nil {
		t.Fatal(err)
	}
	inMem := Static("example.com/agent", []byte("\x7fELF from disk"))
	fromDisk := Static("example.com/agent", nil)
	fromDisk.Files[0].Data, fromDisk.Files[0].Source = nil, src
	ref1, a1, err := inMem.Archive()
	if err != nil {
		t.Fatal(err)
	}
	ref2, err := fromDisk.Ref()
	if err != nil {
		t.Fatal(err)
	}
	var a2 bytes.Buffer
	n, err := fromDisk.WriteTo(&a2)
	if err != nil || n != int64(a2.Len()) {
		t.Fatalf("WriteTo = %d, %v (wrote %d)", n, err, a2.Len())
	}
	ref3, rc, err := fromDisk.Open()
	if err != nil {
		t.Fatal(err)
	}
	a3, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ref1 != ref2 || ref1 != ref3 || !bytes.Equal(a1, a2.Bytes()) || !bytes.Equal(a1, a3) {
		t.Errorf("refs %s %s %s; archives equal: %v %v", ref1, ref2, ref3, bytes.Equal(a1, a2.Bytes()), bytes.Equal(a1, a3))
	}
}

// TestSourceChangedIsAnError: a Source file that changes between the hash and the
// write fails the archive (its digest would lie), and a missing one is an error.
func TestSourceChangedIsAnError(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(src, []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := Static("example.com/agent", []byte("x"))
	img.Files = append(img.Files, File{Path: "/data", Mode: 0o644, Source: src})
	p, err := img.pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"after!", "longer than before", "short"} {
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := p.writeArchive(io.Discard); !errors.Is(err, ErrChanged) {
			t.Errorf("%q: %v, want ErrChanged", content, err)
		}
	}
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if _, err := img.Ref(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing source: %v", err)
	}
	img.Files[len(img.Files)-1].Source = filepath.Dir(src)
	if _, err := img.Ref(); err == nil {
		t.Error("a directory as a source was packed")
	}
}

// archiveMemEnv makes the test binary a child that packs a tree of the given MiB with
// Dir and writes its archive (Archive: in memory, or WriteTo: streamed), then prints
// its peak resident memory.
const archiveMemEnv = "AGENTIMAGE_TEST_ARCHIVE_MEM"

func TestMain(m *testing.M) {
	if v := os.Getenv(archiveMemEnv); v != "" {
		archiveMemChild(v)
		return
	}
	os.Exit(m.Run())
}

func archiveMemChild(v string) {
	mode, dir, _ := strings.Cut(v, ":")
	files, err := Dir(dir, "/data")
	if err == nil {
		img := Static("example.com/big", []byte("x"))
		img.Files = append(img.Files, files...)
		if mode == "archive" {
			_, _, err = img.Archive()
		} else {
			_, err = img.WriteTo(io.Discard)
		}
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("peak_kib", peakKiB())
}

// peakKiB is this process's peak resident memory (VmHWM).
func peakKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// bigTree writes mib MiB of files (1 MiB each) under a fresh directory.
func bigTree(tb testing.TB, mib int) string {
	tb.Helper()
	dir := tb.TempDir()
	chunk := bytes.Repeat([]byte("agentimage streams its layer "), 1<<20/29+1)[:1<<20]
	for i := range mib {
		chunk[0] = byte(i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), chunk, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// archivePeak runs the child on dir and returns its peak resident memory in MiB.
func archivePeak(tb testing.TB, mode, dir string) float64 {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), archiveMemEnv+"="+mode+":"+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("child: %v\n%s", err, out)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "peak_kib ")
	n, perr := strconv.ParseInt(v, 10, 64)
	if !ok || perr != nil || n <= 0 {
		tb.Fatalf("child said %q", out)
	}
	return float64(n) / 1024
}

// TestWriteToMemoryIndependentOfSize: writing the archive of a 150 MiB image takes
// about what writing a 15 MiB one does, far less than the image.
func TestWriteToMemoryIndependentOfSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 165 MiB of files")
	}
	small, big := archivePeak(t, "stream", bigTree(t, 15)), archivePeak(t, "stream", bigTree(t, 150))
	t.Logf("peak resident memory writing the archive: 15 MiB image %.1f MiB, 150 MiB image %.1f MiB", small, big)
	if big > 64 || big > small+16 {
		t.Errorf("writing a 150 MiB image's archive peaked at %.1f MiB (a 15 MiB one at %.1f MiB)", big, small)
	}
}

// BenchmarkArchivePeakMemory reports the peak resident memory of packing a 150 MiB
// image (Dir) and writing its archive: in memory (Archive) and streamed (WriteTo).
// Each op is a child process; the metric is its VmHWM.
func BenchmarkArchivePeakMemory(b *testing.B) {
	dir := bigTree(b, 150)
	for _, mode := range []string{"archive", "stream"} {
		b.Run(mode, func(b *testing.B) {
			var peak float64
			for b.Loop() {
				peak = max(peak, archivePeak(b, mode, dir))
			}
			b.ReportMetric(peak, "peak-MiB")
		})
	}
}
