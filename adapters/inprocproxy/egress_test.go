package inprocproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
	"github.com/agentsandbox/sandbox/port"
)

const egressCanary = "egress-canary-5e1f0c7a9b3d"

func egressManager(t *testing.T) (*Manager, *egresstest.Upstream) {
	up := egresstest.NewUpstream(t, true, "api.test")
	res := egresstest.NewResolver()
	res.Set("api.test", egresstest.Loopback)
	m, _ := newManager(t, WithEgressResolver(res), WithEgressUpstreamRoots(up.PEM), WithEgressUnsafeAllow(netip.MustParsePrefix("127.0.0.1/32")))
	return m, up
}

func egressSpec(runID string, up *egresstest.Upstream) port.ProxySpec {
	spec := testSpec(runID, "http://127.0.0.1:1")
	spec.Egress = &port.EgressPolicy{
		Providers: []port.EgressProvider{{ID: "api", URIs: []string{"https://api.test:" + up.Port() + "/"}, Credentials: []string{"token"}}},
		Credentials: port.CredentialFunc(func(context.Context, string, string, string) (string, error) {
			return egressCanary, nil
		}),
	}
	return spec
}

// egressClient reaches the run's egress socket as the bridge does, trusting the CA
// bundle the run's directory holds.
func egressClient(t *testing.T, p *Proxy) *http.Client {
	bundle, err := os.ReadFile(filepath.Join(p.dir, port.EgressCAName))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(bundle))
	sock := filepath.Join(p.dir, port.EgressSocketName)
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:3128"}),
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

func TestEgressServedOnRunSocket(t *testing.T) {
	m, up := egressManager(t)
	p := start(t, m, egressSpec("eg-1", up))
	sock := p.Socket()
	assert.True(t, sock.Egress)

	// The bundle holds the run's CA certificate and never a key.
	bundle, err := os.ReadFile(filepath.Join(p.dir, port.EgressCAName))
	require.NoError(t, err)
	assert.NotContains(t, string(bundle), "PRIVATE KEY")
	blk, _ := pem.Decode(bundle)
	require.NotNil(t, blk)
	ca, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	assert.True(t, ca.IsCA)
	assert.Contains(t, ca.Subject.CommonName, "eg-1")
	fi, err := os.Stat(filepath.Join(p.dir, port.EgressSocketName))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket, fi.Mode().Type())

	req, _ := http.NewRequest("GET", "https://api.test:"+up.Port()+"/x", nil)
	req.Header.Set("Authorization", "Bearer {{token}}")
	resp, err := egressClient(t, p).Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "%s", body)
	assert.NotContains(t, string(body), egressCanary)
	require.Len(t, up.Seen(), 1)
	assert.Equal(t, "Bearer "+egressCanary, up.Seen()[0].Header.Get("Authorization"))

	// A second run gets its own CA: the first run's bundle does not trust it.
	p2 := start(t, m, egressSpec("eg-2", up))
	b2, _ := os.ReadFile(filepath.Join(p2.dir, port.EgressCAName))
	assert.NotEqual(t, string(bundle[:600]), string(b2[:600]))

	_, err = p.Stop(context.Background())
	require.NoError(t, err)
	recs := p.EgressAudit()
	require.Len(t, recs, 1)
	assert.Equal(t, "api", recs[0].Provider)
	_, err = os.Stat(p.dir)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the run's directory (and CA bundle) is removed")
}

func TestEgressOffByDefault(t *testing.T) {
	m, _ := newManager(t)
	p := start(t, m, testSpec("eg-off", "http://127.0.0.1:1"))
	assert.False(t, p.Socket().Egress)
	for _, n := range []string{port.EgressSocketName, port.EgressCAName} {
		_, err := os.Stat(filepath.Join(p.dir, n))
		assert.True(t, errors.Is(err, os.ErrNotExist), n)
	}
	assert.Nil(t, p.EgressAudit())
}

func TestEgressBadPolicyCreatesNothing(t *testing.T) {
	m, base := newManager(t)
	spec := testSpec("eg-bad", "http://127.0.0.1:1")
	spec.Egress = &port.EgressPolicy{Providers: []port.EgressProvider{{ID: "a", URIs: []string{"https://10.0.0.1/"}}}}
	_, err := m.Start(context.Background(), spec)
	require.ErrorIs(t, err, port.ErrInvalidSpec)
	ents, _ := os.ReadDir(filepath.Join(base, "test"))
	assert.Empty(t, ents)
}

// TestEgressSlowClientIsolated: a client that dribbles its headers holds only its
// own connection; another run's requests are answered at once.
func TestEgressSlowClientIsolated(t *testing.T) {
	m, up := egressManager(t)
	slow := start(t, m, egressSpec("eg-slow", up))
	fast := start(t, m, egressSpec("eg-fast", up))
	for i := 0; i < 8; i++ {
		c, err := net.Dial("unix", filepath.Join(slow.dir, port.EgressSocketName))
		require.NoError(t, err)
		defer c.Close()
		fmt.Fprintf(c, "GET https://api.test/ HTTP/1.1\r\nX-Slow: ")
	}
	c := egressClient(t, fast)
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		resp, err := c.Get("https://api.test:" + up.Port() + "/ok")
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
		assert.Less(t, time.Since(t0), 2*time.Second)
	}
	// The slow run still answers a well-formed request too.
	conn, err := net.Dial("unix", filepath.Join(slow.dir, port.EgressSocketName))
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n\r\n")
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	assert.Equal(t, 403, r.StatusCode)
	assert.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"))
}
