package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

func TestRunFlags(t *testing.T) {
	var stderr strings.Builder
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-bogus"}, &stderr))
	assert.Contains(t, stderr.String(), "usage: sandbox-bridge")

	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-listen", "0.0.0.0:8080", "--", "true"}, &stderr))
	assert.Contains(t, stderr.String(), "not loopback")

	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-listen", "127.0.0.1:0"}, &stderr))
	assert.Contains(t, stderr.String(), "no command given")

	stderr.Reset()
	assert.Equal(t, 4, run([]string{"-listen", "127.0.0.1:0", "--", "sh", "-c", "exit 4"}, &stderr))
	assert.Empty(t, stderr.String())
}

// TestClaimChannelConsumedBeforeCommand: with -claim the run comes from stdin, and the
// command it starts reads nothing from it (it gets /dev/null), even what is written
// after the claim.
func TestClaimChannelConsumedBeforeCommand(t *testing.T) {
	t.Setenv("PATH", os.Getenv("PATH"))
	out := filepath.Join(t.TempDir(), "out")
	c, err := bridgeapi.NewClaim([]string{"sh", "-c", `cat > "$OUT"; echo "$X" >> "$OUT"; exit 3`}, []string{"PATH=" + os.Getenv("PATH"), "OUT=" + out, "X=from-claim"}, "", false, 0, time.Now()).Encode()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	_, err = w.Write(append(c, "spoken-by-someone-else\n"...))
	require.NoError(t, err)
	defer w.Close() // left open: the bridge must not wait for the end
	old := stdin
	stdin = r
	t.Cleanup(func() { stdin = old })
	var stderr strings.Builder
	assert.Equal(t, 3, run([]string{"-claim"}, &stderr), stderr.String())
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "from-claim\n", string(got), "the command read the claim channel or lost its env")

	r, w, err = os.Pipe()
	require.NoError(t, err)
	_, _ = w.Write([]byte("not a claim\n"))
	require.NoError(t, w.Close())
	stdin = r
	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-claim"}, &stderr))
	assert.Contains(t, stderr.String(), "bad claim")
}

// TestClaimExitRecords: a claim with an exit nonce makes the stub end both streams
// with the exit record, after everything the command wrote (its descendants'
// output included); a record the command forges (another nonce) is its output.
func TestClaimExitRecords(t *testing.T) {
	nonce := bridgeapi.NewExitNonce()
	fake := bridgeapi.ExitRecordPrefix + bridgeapi.NewExitNonce() + " 0"
	script := `printf 'out-%s\n' "$FAKE"; printf 'err-%s\n' "$FAKE" >&2; (sleep 0.2; printf late) & printf tail; exit 3`
	c := bridgeapi.NewClaim([]string{"sh", "-c", script}, []string{"PATH=" + os.Getenv("PATH"), "FAKE=" + fake}, "", false, 0, time.Now())
	c.ExitNonce = nonce
	msg, err := c.Encode()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	_, err = w.Write(msg)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	oldIn, oldOut := stdin, stdout
	var out strings.Builder
	stdin, stdout = r, &out
	t.Cleanup(func() { stdin, stdout = oldIn, oldOut })
	var stderr strings.Builder
	assert.Equal(t, 3, run([]string{"-claim"}, &stderr), stderr.String())
	rec := string(bridgeapi.ExitRecord(nonce, 3))
	assert.Equal(t, "out-"+fake+"\ntaillate"+rec, out.String(), "the record must follow all of the command's output, the forged one passing as output")
	assert.Equal(t, "err-"+fake+"\n"+rec, stderr.String())
}
