package agentimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
)

// entries reads a tar archive into name -> header and content.
func entries(t *testing.T, b []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hs[h.Name], data[h.Name] = h, c
	}
}

func TestArchiveIsADockerSaveArchive(t *testing.T) {
	img := Static("example.com/team/agent", []byte("\x7fELF binary"))
	img.Files = append(img.Files, File{Path: "/agent-suid", Mode: 0o755 | fs.ModeSetuid, Data: []byte("x")})
	ref, archive, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, "example.com/team/agent:") || len(ref) != len("example.com/team/agent:")+16 {
		t.Errorf("ref = %q", ref)
	}
	_, files := entries(t, archive)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != ref || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v", manifest)
	}
	var cfg struct {
		Config struct{ Entrypoint []string }
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != Entrypoint {
		t.Errorf("entrypoint = %q", cfg.Config.Entrypoint)
	}
	layer, content := entries(t, files[manifest[0].Layers[0]])
	for name, mode := range map[string]int64{"agent": 0o755, "agent-suid": 0o4755, "tmp/": 0o1777, "workspace/": 0o755, "etc/passwd": 0o644} {
		h, ok := layer[name]
		if !ok {
			t.Errorf("layer lacks %s", name)
			continue
		}
		if h.Mode != mode || h.Uid != 0 {
			t.Errorf("%s: mode %o uid %d, want %o and 0", name, h.Mode, h.Uid, mode)
		}
	}
	if string(content["agent"]) != "\x7fELF binary" || !strings.Contains(string(content["etc/passwd"]), ":1001:1001:") {
		t.Errorf("content: agent %q, passwd %q", content["agent"], content["etc/passwd"])
	}
}

func TestArchiveIsDeterministic(t *testing.T) {
	ref1, a1, err := Static("agent", []byte("one")).Archive()
	if err != nil {
		t.Fatal(err)
	}
	ref2, a2, _ := Static("agent", []byte("one")).Archive()
	ref3, _, _ := Static("agent", []byte("two")).Archive()
	if ref1 != ref2 || !bytes.Equal(a1, a2) {
		t.Error("the same inputs gave different archives")
	}
	if ref1 == ref3 {
		t.Error("different binaries gave the same reference")
	}
}

func TestArchiveRefusesBadInput(t *testing.T) {
	for name, img := range map[string]Image{
		"empty name":     {},
		"tag in name":    {Name: "agent:latest"},
		"uppercase name": {Name: "Agent"},
		"space in name":  {Name: "my agent"},
		"relative path":  {Name: "agent", Files: []File{{Path: "etc/passwd"}}},
		"bad tag":        {Name: "agent", Tag: "a:b"},
		"dotted tag":     {Name: "agent", Tag: ".x"},
	} {
		if _, _, err := img.Archive(); !errors.Is(err, errdefs.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestBuildGoReportsTheCompilerError(t *testing.T) {
	_, err := BuildGo(t.Context(), "./no-such-agent")
	if err == nil || !strings.Contains(err.Error(), "agentimage: building ./no-such-agent") {
		t.Errorf("err = %v", err)
	}
}

// TestArchiveLabels: Labels reach the image config beside ImageLabel, change the
// reference, and bad or reserved labels are refused.
func TestArchiveLabels(t *testing.T) {
	img := Static("example.com/agent", []byte("x"))
	plain, _, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	img.Labels = map[string]string{TestImageLabel: "suite"}
	ref, archive, err := img.Archive()
	if err != nil {
		t.Fatal(err)
	}
	if ref == plain {
		t.Error("a labelled image has the unlabelled one's reference")
	}
	_, files := entries(t, archive)
	var manifest []struct{ Config string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest: %v %s", err, files["manifest.json"])
	}
	var cfg struct {
		Config struct{ Labels map[string]string }
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Labels) != 2 || cfg.Config.Labels[TestImageLabel] != "suite" || cfg.Config.Labels[ImageLabel] != "agentimage" {
		t.Errorf("labels = %v", cfg.Config.Labels)
	}
	for _, bad := range []map[string]string{{"": "x"}, {ImageLabel: "mine"}, {"k": "a\x00b"}, {"k\n": "v"}} {
		img.Labels = bad
		if _, _, err := img.Archive(); !errors.Is(err, errdefs.ErrInvalidSpec) {
			t.Errorf("labels %q: err = %v, want ErrInvalidSpec", bad, err)
		}
	}
}

// A given tag names the image instead of the content's.
func TestArchiveTag(t *testing.T) {
	img := Static("agentsandbox/agent", []byte("one"))
	img.Tag = "latest"
	ref, a, err := img.Archive()
	if err != nil || ref != "agentsandbox/agent:latest" {
		t.Fatalf("ref %q, %v", ref, err)
	}
	_, data := entries(t, a)
	var m []struct{ RepoTags []string }
	if err := json.Unmarshal(data["manifest.json"], &m); err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != ref {
		t.Errorf("manifest %s: %v", data["manifest.json"], err)
	}
}
