package sandboxbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

func TestEgressDefaultsMatchThePort(t *testing.T) {
	assert.Equal(t, port.EgressProxyAddr, DefaultEgressListen)
	assert.Equal(t, path.Join(port.LLMSocketDir, port.EgressSocketName), DefaultEgressSocket)
}

// TestChildReachesTheEgressSocket: with Egress set, a second listener forwards to the
// egress socket before the child starts, next to the LLM listener.
func TestChildReachesTheEgressSocket(t *testing.T) {
	llm := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "llm") }))
	eg := socketHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "egress saw %s %s", r.Method, r.URL.String())
	}))
	addr, egAddr := freePort(t), freePort(t)
	stdout := outFile(t)
	code, err := Run(context.Background(), Config{
		Listen: addr, Socket: llm, Egress: egAddr, EgressSocket: eg,
		Argv:   []string{os.Args[0], "-test.run=^$"},
		Env:    append(os.Environ(), childEnv+"=http://"+egAddr+"/proxy"),
		Stdout: stdout,
	})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "egress saw GET /proxy", contents(t, stdout))

	// Refused: a non-loopback egress address.
	_, err = Run(context.Background(), Config{Listen: freePort(t), Socket: llm, Egress: "0.0.0.0:3128", Argv: []string{"true"}})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestWithEgressPrefix(t *testing.T) {
	p := bridgeapi.WithEgress(bridgeapi.Prefix("/b", true, time.Minute, time.Unix(0, 0)))
	assert.Equal(t, []string{"-egress", DefaultEgressListen, "--"}, p[len(p)-3:])
	assert.Equal(t, "/b", p[0])
	c := bridgeapi.Claim{Argv: []string{"x"}, Egress: true, Forward: true}
	b, err := c.Encode()
	require.NoError(t, err)
	got, err := bridgeapi.ReadClaim(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, DefaultEgressListen, ClaimConfig(got).Egress)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, true, m["egress"])
}
