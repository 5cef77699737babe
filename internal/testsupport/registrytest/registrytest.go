// Package registrytest runs a real container registry for tests: Debian's
// docker-registry (the CNCF distribution registry) on a free loopback port, with its
// own storage directory and htpasswd authentication, stopped when the test ends. It
// pushes image archives (agentimage.Image.Archive, `docker save`) through the
// registry's HTTP API, so a test needs no engine to fill it. Install the parts with
// scripts/install-registry.sh.
package registrytest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
)

// Registry is a running registry.
type Registry struct {
	// Addr is host:port on 127.0.0.1: the registry part of its references.
	Addr string
	// User and Password are the one account htpasswd knows.
	User, Password string
}

// Start starts a registry for t and stops it (and removes its storage) at cleanup.
// It needs docker-registry and htpasswd (scripts/install-registry.sh): missing, the
// test skips, or fails when SANDBOX_REQUIRE names "registry".
func Start(t testing.TB) *Registry {
	t.Helper()
	bin := testenv.NeedCommand(t, "registry", "docker-registry")
	htpasswd := testenv.NeedCommand(t, "registry", "htpasswd")
	dir := t.TempDir()
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	r := &Registry{User: "agent-puller", Password: hex.EncodeToString(pw)}
	out, err := exec.Command(htpasswd, "-Bbn", r.User, r.Password).Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Addr = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
auth:
  htpasswd:
    realm: agentsandbox-test
    path: %s
`, filepath.Join(dir, "data"), r.Addr, filepath.Join(dir, "htpasswd"))
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// The registry dies with the test binary, even one killed outright.
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		select {
		case <-exited:
			t.Fatalf("docker-registry exited: %s", logs.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v %s", r.Addr, err, logs.Bytes())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ref is Addr/repo:tag.
func (r *Registry) Ref(repo, tag string) string { return r.Addr + "/" + repo + ":" + tag }

const (
	manifestType = "application/vnd.docker.distribution.manifest.v2+json"
	configType   = "application/vnd.docker.container.image.v1+json"
	layerType    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

type descriptor struct {
	MediaType string `json:"mediaType"`
	Size      int64  `json:"size"`
	Digest    string `json:"digest"`
}

// Push uploads the single image of a `docker save` archive as repo:tag (gzipping its
// layers) and returns the manifest's digest, "sha256:...".
func (r *Registry) Push(ctx context.Context, repo, tag string, archive []byte) (string, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return "", err
		}
		files[path.Clean(h.Name)] = b
	}
	var m []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 {
		return "", fmt.Errorf("registrytest: archive has no single-image manifest.json (%v)", err)
	}
	cfg := files[path.Clean(m[0].Config)]
	cfgDesc, err := r.putBlob(ctx, repo, cfg)
	if err != nil {
		return "", err
	}
	cfgDesc.MediaType = configType
	mf := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{SchemaVersion: 2, MediaType: manifestType, Config: cfgDesc}
	for _, l := range m[0].Layers {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		if _, err := zw.Write(files[path.Clean(l)]); err != nil {
			return "", err
		}
		if err := zw.Close(); err != nil {
			return "", err
		}
		d, err := r.putBlob(ctx, repo, gz.Bytes())
		if err != nil {
			return "", err
		}
		d.MediaType = layerType
		mf.Layers = append(mf.Layers, d)
	}
	body, err := json.Marshal(mf)
	if err != nil {
		return "", err
	}
	req, err := r.request(ctx, http.MethodPut, "/v2/"+repo+"/manifests/"+tag, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", manifestType)
	if _, err := r.do(req, http.StatusCreated); err != nil {
		return "", fmt.Errorf("registrytest: put manifest: %w", err)
	}
	return sha(body), nil
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (r *Registry) putBlob(ctx context.Context, repo string, blob []byte) (descriptor, error) {
	d := descriptor{Size: int64(len(blob)), Digest: sha(blob)}
	req, err := r.request(ctx, http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil)
	if err != nil {
		return d, err
	}
	resp, err := r.do(req, http.StatusAccepted)
	if err != nil {
		return d, fmt.Errorf("registrytest: start upload: %w", err)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return d, err
	}
	q := loc.Query()
	q.Set("digest", d.Digest)
	loc.RawQuery = q.Encode()
	target := loc.RequestURI()
	req, err = r.request(ctx, http.MethodPut, target, bytes.NewReader(blob))
	if err != nil {
		return d, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if _, err := r.do(req, http.StatusCreated); err != nil {
		return d, fmt.Errorf("registrytest: put blob: %w", err)
	}
	return d, nil
}

func (r *Registry) request(ctx context.Context, method, uri string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.Addr+uri, body)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(r.User, r.Password)
	return req, nil
}

func (r *Registry) do(req *http.Request, want int) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, errors.New(resp.Status + ": " + strings.TrimSpace(string(b)))
	}
	return resp, nil
}
