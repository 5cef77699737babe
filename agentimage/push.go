package agentimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/runner/imageref"
	"github.com/agentsandbox/sandbox/port"
)

// Media types of what Push uploads: a Docker image manifest (schema 2), which both
// runtimes pull.
const (
	manifestMediaType = "application/vnd.docker.distribution.manifest.v2+json"
	configMediaType   = "application/vnd.docker.container.image.v1+json"
	layerMediaType    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// PushOptions configures Image.Push.
type PushOptions struct {
	// Credentials gives the registry's credentials, asked for its host (as the
	// runners' pulls ask); nil pushes anonymously.
	Credentials port.RegistryCredentials
	// Client makes the HTTP requests (default: a client with http.DefaultTransport's
	// settings); give one with your CA for a registry with a private certificate.
	Client *http.Client
}

// Push uploads the image to a registry as ref (registry/repository:tag, such as
// "registry.example.com/team/agent:v3") and returns the digest of its manifest
// ("sha256:..."): a run can pin it (ref's repository@digest), and both runners pull it
// (PullImage, WithPullPolicy). The layer goes gzipped through a temporary file, so
// memory does not grow with the image; blobs the registry holds already are not sent
// again. Registries on loopback addresses are spoken to over plain HTTP (as Docker and
// the runners allow for 127.0.0.0/8), others over HTTPS. The registry may ask for
// Basic authentication or for a Bearer token from its token service; the password
// goes only to the registry (or its token service) and is in no error.
//
// Errors: errdefs.ErrInvalidSpec for a bad image or reference (a pinned digest
// cannot be pushed to), errdefs.ErrPermissionDenied when the registry refuses the
// credentials, errdefs.ErrUnavailable when it cannot be reached, ErrChanged when a
// Source file changed while the image was pushed.
func (img Image) Push(ctx context.Context, ref string, opts PushOptions) (string, error) {
	r, err := imageref.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("agentimage: push: %w", err)
	}
	if r.Digest != "" {
		return "", errdefs.Invalidf("agentimage: push: %q pins a digest; push to a tag", ref)
	}
	p, err := img.pack()
	if err != nil {
		return "", err
	}
	c := &registryClient{opts: opts, ref: r, repo: strings.TrimPrefix(r.Name, r.Domain+"/")}
	c.host, c.base = registryEndpoint(r.Domain)
	if c.opts.Client == nil {
		c.opts.Client = &http.Client{}
	}
	fail := func(err error) (string, error) { return "", fmt.Errorf("agentimage: push %s: %w", ref, err) }
	if err := c.login(ctx); err != nil {
		return fail(err)
	}
	// The layer, gzipped into a temporary file while its digests are taken.
	layer, err := os.CreateTemp("", "agentimage-layer-*.tar.gz")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(layer.Name())
	defer layer.Close()
	gzSum, diffSum := sha256.New(), sha256.New()
	zw := gzip.NewWriter(io.MultiWriter(layer, gzSum))
	if _, err := writeLayer(io.MultiWriter(zw, diffSum), p.files); err != nil {
		return fail(err)
	}
	if err := zw.Close(); err != nil {
		return fail(err)
	}
	if !bytes.Equal(diffSum.Sum(nil), p.layerSum[:]) {
		return fail(ErrChanged)
	}
	size, err := layer.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	layerDesc := descriptor{MediaType: layerMediaType, Size: size, Digest: "sha256:" + hex.EncodeToString(gzSum.Sum(nil))}
	cfgSum := sha256.Sum256(p.cfg)
	cfgDesc := descriptor{MediaType: configMediaType, Size: int64(len(p.cfg)), Digest: "sha256:" + hex.EncodeToString(cfgSum[:])}
	if err := c.putBlob(ctx, cfgDesc, func() (io.Reader, error) { return bytes.NewReader(p.cfg), nil }); err != nil {
		return fail(err)
	}
	if err := c.putBlob(ctx, layerDesc, func() (io.Reader, error) {
		_, err := layer.Seek(0, io.SeekStart)
		return io.LimitReader(layer, size), err
	}); err != nil {
		return fail(err)
	}
	manifest, err := json.Marshal(struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{2, manifestMediaType, cfgDesc, []descriptor{layerDesc}})
	if err != nil {
		return fail(err)
	}
	resp, err := c.do(ctx, http.MethodPut, c.base+"/v2/"+c.repo+"/manifests/"+r.Tag, manifestMediaType, int64(len(manifest)),
		func() (io.Reader, error) { return bytes.NewReader(manifest), nil })
	if err != nil {
		return fail(err)
	}
	if err := expect(resp, http.StatusCreated); err != nil {
		return fail(fmt.Errorf("manifest: %w", err))
	}
	sum := sha256.Sum256(manifest)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// descriptor is a blob in a manifest.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Size      int64  `json:"size"`
	Digest    string `json:"digest"`
}

// registryEndpoint is the host credentials are asked for and the API's base URL:
// plain HTTP on loopback, HTTPS elsewhere; Docker Hub's API host for docker.io.
func registryEndpoint(domain string) (host, base string) {
	if domain == "docker.io" {
		return domain, "https://registry-1.docker.io"
	}
	h := domain
	if hh, _, err := net.SplitHostPort(domain); err == nil {
		h = hh
	}
	if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
		return domain, "http://" + domain
	}
	return domain, "https://" + domain
}

// registryClient speaks the distribution API to one repository with one
// Authorization header, learnt by login.
type registryClient struct {
	opts       PushOptions
	ref        imageref.Ref
	repo       string
	host, base string
	auth       string
}

// login asks the registry how it wants to be authenticated (the challenge of GET
// /v2/) and prepares the Authorization header: Basic, or a Bearer token for pushing
// to the repository from the registry's token service.
func (c *registryClient) login(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, c.base+"/v2/", "", 0, nil)
	if err != nil {
		return err
	}
	drain(resp)
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("%w: GET /v2/: %s", errdefs.ErrUnavailable, resp.Status)
	}
	var user, pass string
	if c.opts.Credentials != nil {
		a, ok, err := c.opts.Credentials.RegistryAuth(ctx, c.host)
		if err != nil {
			return fmt.Errorf("registry credentials for %s: %w", c.host, err)
		}
		if ok {
			user, pass = a.Username, a.Password
		}
	}
	scheme, params := parseChallenge(resp.Header.Get("WWW-Authenticate"))
	switch scheme {
	case "basic":
		if user == "" && pass == "" {
			return fmt.Errorf("%w: the registry asks for credentials and none were given", errdefs.ErrPermissionDenied)
		}
		c.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		return nil
	case "bearer":
		return c.token(ctx, params, user, pass)
	}
	return fmt.Errorf("%w: the registry asks for authentication %q, which Push does not speak", errdefs.ErrUnsupported, scheme)
}

// token gets a Bearer token for pulling and pushing the repository (the distribution
// token protocol), with the credentials as Basic authentication when given.
func (c *registryClient) token(ctx context.Context, params map[string]string, user, pass string) error {
	realm, err := url.Parse(params["realm"])
	if err != nil || (realm.Scheme != "https" && realm.Scheme != "http") {
		return fmt.Errorf("%w: the registry's token realm %q is not a URL", errdefs.ErrUnavailable, params["realm"])
	}
	q := realm.Query()
	if s := params["service"]; s != "" {
		q.Set("service", s)
	}
	q.Set("scope", "repository:"+c.repo+":pull,push")
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return err
	}
	if user != "" || pass != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: token service: %v", errdefs.ErrUnavailable, redact(err))
	}
	defer drain(resp)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%w: the token service refused the credentials (%s)", errdefs.ErrPermissionDenied, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: token service: %s", errdefs.ErrUnavailable, resp.Status)
	}
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&t); err != nil || (t.Token == "" && t.AccessToken == "") {
		return fmt.Errorf("%w: the token service's answer holds no token", errdefs.ErrUnavailable)
	}
	if t.Token == "" {
		t.Token = t.AccessToken
	}
	c.auth = "Bearer " + t.Token
	return nil
}

// parseChallenge splits a WWW-Authenticate header into its scheme (lower case) and
// its parameters.
func parseChallenge(h string) (string, map[string]string) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
	params := map[string]string{}
	for rest != "" {
		var kv string
		rest = strings.TrimLeft(rest, " ,")
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`)
			if end < 0 {
				break
			}
			kv, rest = v[1:1+end], v[2+end:]
		} else {
			kv, rest, _ = strings.Cut(v, ",")
		}
		params[strings.ToLower(strings.TrimSpace(k))] = kv
	}
	return strings.ToLower(scheme), params
}

// putBlob uploads a blob unless the repository has it: a monolithic upload (POST,
// then PUT with the digest).
func (c *registryClient) putBlob(ctx context.Context, d descriptor, body func() (io.Reader, error)) error {
	resp, err := c.do(ctx, http.MethodHead, c.base+"/v2/"+c.repo+"/blobs/"+d.Digest, "", 0, nil)
	if err != nil {
		return err
	}
	drain(resp)
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = c.do(ctx, http.MethodPost, c.base+"/v2/"+c.repo+"/blobs/uploads/", "", 0, nil)
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusAccepted); err != nil {
		return fmt.Errorf("starting an upload: %w", err)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("%w: the registry gave no upload location", errdefs.ErrUnavailable)
	}
	base, _ := url.Parse(c.base + "/")
	u := base.ResolveReference(loc)
	if u.Host != base.Host {
		// The upload goes where the credentials go, nowhere else.
		return fmt.Errorf("%w: the registry sent the upload to another host (%s)", errdefs.ErrUnavailable, u.Host)
	}
	q := u.Query()
	q.Set("digest", d.Digest)
	u.RawQuery = q.Encode()
	resp, err = c.do(ctx, http.MethodPut, u.String(), "application/octet-stream", d.Size, body)
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusCreated); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

// do sends a request, authenticated once login has run; body (nil for none) gives
// the body afresh each time it is called, for a redirect.
func (c *registryClient) do(ctx context.Context, method, u, ctype string, size int64, body func() (io.Reader, error)) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		var err error
		if rd, err = body(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.GetBody = func() (io.ReadCloser, error) {
			r, err := body()
			return io.NopCloser(r), err
		}
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, redact(err))
	}
	return resp, nil
}

// expect closes resp and says why its status is not want (the registry's error
// message, typed: a refusal is ErrPermissionDenied).
func expect(resp *http.Response, want int) error {
	defer drain(resp)
	if resp.StatusCode == want {
		return nil
	}
	var body struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	msg := resp.Status
	for _, e := range body.Errors {
		msg += "; " + e.Code + ": " + e.Message
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %s", errdefs.ErrPermissionDenied, msg)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s", errdefs.ErrNotFound, msg)
	case http.StatusBadRequest:
		return fmt.Errorf("%w: %s", errdefs.ErrInvalidSpec, msg)
	}
	return fmt.Errorf("%w: %s", errdefs.ErrUnavailable, msg)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// redact drops a URL's user information from a transport error.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.User != nil {
			u.User = nil
			return &url.Error{Op: ue.Op, URL: u.String(), Err: ue.Err}
		}
	}
	return err
}
