package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// readLogFile returns what a session log file holds.
func readLogFile(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	c, err := bridgeapi.LogCapacity(f)
	require.NoError(t, err)
	buf := make([]byte, c)
	_, n, _, err := bridgeapi.ReadLog(f, c, 0, buf)
	require.NoError(t, err)
	return string(buf[:n])
}

// TestSessionLog: with -log-dir the command's stdout and stderr land in the session's
// log files, and so do the bridge's own notices about the run (here: the command is
// not found); without -output-cap the flag is refused.
func TestSessionLog(t *testing.T) {
	t.Setenv("PATH", os.Getenv("PATH"))
	dir := t.TempDir()
	mk := func() {
		for _, n := range []string{bridgeapi.LogStdout, bridgeapi.LogStderr} {
			_ = os.Remove(filepath.Join(dir, n))
			require.NoError(t, bridgeapi.CreateLog(filepath.Join(dir, n), 4096, 0o600))
		}
	}
	mk()
	var stderr strings.Builder
	code := run([]string{"-no-forward", "-output-cap", "1024", "-" + bridgeapi.FlagLogDir, dir, "--", "sh", "-c", "echo out; echo err >&2; echo out2; exit 5"}, &stderr)
	assert.Equal(t, 5, code, stderr.String())
	assert.Equal(t, "out\nout2\n", readLogFile(t, filepath.Join(dir, bridgeapi.LogStdout)))
	assert.Equal(t, "err\n", readLogFile(t, filepath.Join(dir, bridgeapi.LogStderr)))

	mk()
	stderr.Reset()
	code = run([]string{"-no-forward", "-output-cap", "1024", "-" + bridgeapi.FlagLogDir, dir, "--", "/no/such/command"}, &stderr)
	assert.Equal(t, bridgeapi.ExitNotFound, code)
	logged := readLogFile(t, filepath.Join(dir, bridgeapi.LogStderr))
	assert.Contains(t, logged, bridgeapi.ExecFailedPrefix)
	assert.Equal(t, stderr.String(), logged, "the notice is on the bridge's stderr and in the log alike")

	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-no-forward", "-" + bridgeapi.FlagLogDir, dir, "--", "true"}, &stderr))
	assert.Contains(t, stderr.String(), "needs -output-cap")
	stderr.Reset()
	assert.Equal(t, bridgeapi.ExitBridgeFailed, run([]string{"-no-forward", "-output-cap", "10", "-" + bridgeapi.FlagLogDir, t.TempDir(), "--", "true"}, &stderr))
	assert.Contains(t, stderr.String(), "session log")
}
