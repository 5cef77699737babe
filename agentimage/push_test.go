package agentimage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/testsupport/registrytest"
	"github.com/agentsandbox/sandbox/port"
)

// TestPushToRegistry pushes to Debian's docker-registry with htpasswd authentication:
// the manifest's digest comes back and the registry serves it under the tag; a second
// push of the same image sends no blob again and gives the same digest; a wrong
// password and no credentials are ErrPermissionDenied, with no password in the
// error; a pinned reference cannot be pushed to. (The runners pull what it pushes in
// registrytest.TestPuller.)
func TestPushToRegistry(t *testing.T) {
	reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img := agentimage.Static("example.com/pushed", []byte("\x7fELF pushed agent"))
	ref := reg.Ref("team/pushed", "v1")
	d1, err := img.Push(ctx, ref, agentimage.PushOptions{Credentials: reg.Credentials()})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+reg.Addr+"/v2/team/pushed/manifests/v1", nil)
	req.SetBasicAuth(reg.User, reg.Password)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Config struct{ Digest string }
		Layers []struct{ MediaType string }
	}
	err = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Docker-Content-Digest") != d1 || len(m.Layers) != 1 || !strings.HasSuffix(m.Layers[0].MediaType, "tar.gzip") {
		t.Fatalf("the registry serves %s (%v) %+v, push said %s", resp.Header.Get("Docker-Content-Digest"), err, m, d1)
	}
	ir, _ := img.Ref()
	if !strings.HasPrefix(m.Config.Digest, "sha256:"+strings.TrimPrefix(ir, "example.com/pushed:")) {
		t.Errorf("config %s is not the archive's (%s)", m.Config.Digest, ir)
	}
	if d2, err := img.Push(ctx, reg.Ref("team/pushed", "v2"), agentimage.PushOptions{Credentials: reg.Credentials()}); err != nil || d2 != d1 {
		t.Errorf("a second push: %s %v, want %s", d2, err, d1)
	}
	bad := port.StaticRegistryCredentials{reg.Addr: {Username: reg.User, Password: "wrong-" + reg.Password}}
	for name, creds := range map[string]port.RegistryCredentials{"wrong password": bad, "anonymous": nil} {
		_, err := img.Push(ctx, ref, agentimage.PushOptions{Credentials: creds})
		if !errors.Is(err, errdefs.ErrPermissionDenied) || strings.Contains(err.Error(), reg.Password) {
			t.Errorf("%s: %v, want ErrPermissionDenied without the password", name, err)
		}
	}
	if _, err := img.Push(ctx, ref+"@"+d1, agentimage.PushOptions{Credentials: reg.Credentials()}); !errors.Is(err, errdefs.ErrInvalidSpec) {
		t.Errorf("a pinned reference: %v, want ErrInvalidSpec", err)
	}
}

// TestPushBearerToken: a registry that asks for a Bearer token gets one from its token
// service with the credentials, and every API request carries the token (never the
// password); a token service that refuses is ErrPermissionDenied.
func TestPushBearerToken(t *testing.T) {
	var sawPassword atomic.Bool
	var tokens atomic.Int32
	reg := httptest.NewServer(nil)
	defer reg.Close()
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != "agent" || p != "s3cret" || r.URL.Query().Get("scope") != "repository:team/a:pull,push" || r.URL.Query().Get("service") != "reg" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		tokens.Add(1)
		_, _ = io.WriteString(w, `{"token":"tok-123"}`)
	}))
	defer tokenSrv.Close()
	blobs := map[string]bool{}
	reg.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), "s3cret") || strings.HasPrefix(r.Header.Get("Authorization"), "Basic") {
			sawPassword.Store(true)
		}
		if r.Header.Get("Authorization") != "Bearer tok-123" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+tokenSrv.URL+`/token",service="reg",scope="registry:catalog:*"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodHead:
			if blobs[r.URL.Path] {
				return
			}
			w.WriteHeader(http.StatusNotFound)
		case r.Method == http.MethodPost:
			w.Header().Set("Location", "/v2/team/a/blobs/uploads/u1")
			w.WriteHeader(http.StatusAccepted)
		case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blobs/uploads/"):
			_, _ = io.Copy(io.Discard, r.Body)
			blobs["/v2/team/a/blobs/"+r.URL.Query().Get("digest")] = true
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifests/v1"):
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	ref := strings.TrimPrefix(reg.URL, "http://") + "/team/a:v1"
	host := strings.TrimPrefix(reg.URL, "http://")
	img := agentimage.Static("example.com/a", []byte("bin"))
	ctx := context.Background()
	if _, err := img.Push(ctx, ref, agentimage.PushOptions{Credentials: port.StaticRegistryCredentials{host: {Username: "agent", Password: "s3cret"}}}); err != nil {
		t.Fatal(err)
	}
	if tokens.Load() != 1 || len(blobs) != 2 || sawPassword.Load() {
		t.Errorf("tokens %d, blobs %d, password sent to the registry: %v", tokens.Load(), len(blobs), sawPassword.Load())
	}
	_, err := img.Push(ctx, ref, agentimage.PushOptions{Credentials: port.StaticRegistryCredentials{host: {Username: "agent", Password: "wrong"}}})
	if !errors.Is(err, errdefs.ErrPermissionDenied) || strings.Contains(err.Error(), "wrong") {
		t.Errorf("a refused token: %v", err)
	}
}
