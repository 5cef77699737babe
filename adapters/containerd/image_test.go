package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// retag rewrites a `docker save` archive's RepoTags to tag.
func retag(t testing.TB, archive []byte, tag string) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			var m []map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m[0]["RepoTags"] = []string{tag}
			b, _ = json.Marshal(m)
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// LoadImage skips an archive whose images are present with the same content (another
// process loaded them), and imports one whose tag now names other content.
func TestLoadImageSkipsPresentContent(t *testing.T) {
	r, _ := runnerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tag := "agentsandbox/loadskip:" + time.Now().Format("150405.000000")
	a := retag(t, mustArchive(t, "first"), tag)
	b := retag(t, mustArchive(t, "second"), tag)
	t.Cleanup(func() { _ = r.Client().ImageService().Delete(r.ns(context.Background()), "docker.io/"+tag) })

	if _, ok := r.present(r.ns(ctx), bytes.NewReader(a)); ok {
		t.Fatal("an image never loaded is reported present")
	}
	names, err := r.LoadImage(ctx, bytes.NewReader(a))
	if err != nil || len(names) != 1 || names[0] != "docker.io/"+tag {
		t.Fatalf("first load: %v %v", names, err)
	}
	if got, ok := r.present(r.ns(ctx), bytes.NewReader(a)); !ok || got[0] != names[0] {
		t.Fatalf("the loaded archive is not present: %v %v", got, ok)
	}
	// The same tag over other content: not present, imported.
	if _, ok := r.present(r.ns(ctx), bytes.NewReader(b)); ok {
		t.Fatal("other content under the same tag is reported present")
	}
	if _, err := r.LoadImage(ctx, io.MultiReader(bytes.NewReader(b))); err != nil { // not seekable: spooled
		t.Fatal(err)
	}
	if _, ok := r.present(r.ns(ctx), bytes.NewReader(b)); !ok {
		t.Error("the second content was not imported")
	}
	if _, ok := r.present(r.ns(ctx), bytes.NewReader(a)); ok {
		t.Error("the tag still names the first content")
	}
	// Not an archive: no skip, and the import's own error.
	if _, err := r.LoadImage(ctx, bytes.NewReader([]byte("not a tar"))); err == nil {
		t.Error("garbage loaded")
	}
}

func mustArchive(t testing.TB, content string) []byte {
	t.Helper()
	img := agentimage.Static("agentsandbox/loadskip", []byte("#!/bin/false\n"+content))
	img.Labels = map[string]string{agentimage.TestImageLabel: "containerd"}
	_, archive, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

// BenchmarkLoadImagePresent loads an archive whose image is already in the namespace,
// as a second process does: "import" is the import containerd would do again,
// "skip" the check that replaces it. Alternated in one run; compare the ns/op.
func BenchmarkLoadImagePresent(b *testing.B) {
	r, _ := runnerEnv(b)
	ctx := context.Background()
	_, archive, err := sandboxtest.ProbeImage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		skip bool
	}{{"import", false}, {"skip", true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := r.loadImage(ctx, bytes.NewReader(archive), c.skip); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(archive))/(1<<20), "archive-MiB")
		})
	}
}
