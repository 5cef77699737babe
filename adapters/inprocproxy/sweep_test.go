package inprocproxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/port"
)

// crashEnv makes the test binary act as a host process that starts a proxy and dies
// without stopping it (see TestMain).
const crashEnv = "INPROC_TEST_CRASH"

func TestMain(m *testing.M) {
	if v := os.Getenv(crashEnv); v != "" {
		os.Exit(crashHelper(v))
	}
	os.Exit(m.Run())
}

// crashHelper starts a proxy for "base|owner|run", prints its directory and exits
// without cleaning up, like a host process killed mid-run.
func crashHelper(arg string) int {
	parts := strings.Split(arg, "|")
	m, err := NewManager(WithBaseDir(parts[0]), WithOwner(parts[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := m.Start(context.Background(), testSpec(parts[2], "http://127.0.0.1:1"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(p.Socket().HostDir)
	return 3
}

// crashedRun leaves a per-run directory behind from a process that died.
func crashedRun(t *testing.T, base, owner, runID string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+base+"|"+owner+"|"+runID)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr: %s", errb.String())
	require.Equal(t, 3, ee.ExitCode(), "stderr: %s", errb.String())
	dir := out.String()
	require.DirExists(t, dir)
	require.FileExists(t, filepath.Join(dir, port.LLMSocketName), "a dead process leaves its socket file")
	return dir
}

func TestSweepRemovesWhatADeadProcessLeft(t *testing.T) {
	base := shortTempDir(t)
	stale := crashedRun(t, base, "host1", "crashed-1")
	otherOwner := crashedRun(t, base, "host2", "crashed-2")

	up := newUpstream(t)
	// A proxy of another live host process with the same owner (modelled by a second
	// manager), and one of the sweeping manager itself.
	live, err := NewManager(WithBaseDir(base), WithOwner("host1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = live.Shutdown(context.Background()) })
	liveP := start(t, live, testSpec("live-1", up.URL))
	m, err := NewManager(WithBaseDir(base), WithOwner("host1"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	own := start(t, m, testSpec("own-1", up.URL))

	// A marker cut short by a crash while it was written.
	junk := filepath.Join(base, "host1", "junk-0123456789ab")
	require.NoError(t, os.Mkdir(junk, 0o711))
	require.NoError(t, os.WriteFile(junk+".json", []byte(`{"version":1,"di`), 0o600))

	ctx := context.Background()
	rep, err := m.Sweep(ctx, port.SweepOptions{OlderThan: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, rep.Removed, "everything is younger than the grace period")

	rep, err = m.Sweep(ctx, port.SweepOptions{RunID: "someone-else"})
	require.NoError(t, err)
	assert.Empty(t, rep.Removed)

	rep, err = m.Sweep(ctx, port.SweepOptions{DryRun: true})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"dir:" + stale, "dir:" + junk}, rep.Removed)
	assert.Empty(t, rep.Errors)
	assert.DirExists(t, stale, "a dry run removes nothing")

	rep, err = m.Sweep(ctx, port.SweepOptions{RunID: "crashed-1"})
	require.NoError(t, err)
	assert.Equal(t, []string{"dir:" + stale}, rep.Removed)
	assert.NoDirExists(t, stale)
	assert.NoFileExists(t, stale+".json")
	assert.DirExists(t, junk, "another run's leftovers stay when RunID is set")

	rep, err = m.Sweep(ctx, port.SweepOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"dir:" + junk}, rep.Removed)
	assert.NoFileExists(t, junk+".json")

	assert.DirExists(t, otherOwner, "other owners' directories are never touched")
	assert.FileExists(t, otherOwner+".json")
	for _, p := range []*Proxy{liveP, own} {
		assert.DirExists(t, p.Socket().HostDir, "live proxies are kept")
		_, body := get(t, client(p), "/health")
		assert.Contains(t, body, p.RunID())
	}

	rep, err = m.Sweep(ctx, port.SweepOptions{})
	require.NoError(t, err)
	assert.Empty(t, rep.Removed, "a second sweep finds nothing")
}

func TestSweepValidatesOptions(t *testing.T) {
	m, _ := newManager(t)
	_, err := m.Sweep(context.Background(), port.SweepOptions{RunID: "../x"})
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
	_, err = m.Sweep(context.Background(), port.SweepOptions{OlderThan: -time.Second})
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
	rep, err := m.Sweep(context.Background(), port.SweepOptions{})
	require.NoError(t, err, "a base directory that does not exist yet is empty")
	assert.Empty(t, rep.Removed)
}
