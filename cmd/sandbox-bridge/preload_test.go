package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/preload"
)

// asBridge makes this test binary the bridge, for tests that need it as a process of
// its own (stdin, stdout and the exit code are the protocol).
const asBridge = "AGENTSANDBOX_TEST_AS_BRIDGE"

func TestMain(m *testing.M) {
	if os.Getenv(asBridge) == "1" {
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// stub is a bridge process started with -claim -preload.
type stub struct {
	cmd    *exec.Cmd
	claim  io.WriteCloser
	out    *bufio.Reader
	stderr strings.Builder
}

func startStub(t *testing.T, flags []string, preloadArgv ...string) *stub {
	t.Helper()
	args := append(append([]string{"-claim", "-preload"}, flags...), "--")
	cmd := exec.Command(os.Args[0], append(args, preloadArgv...)...)
	cmd.Env = append(os.Environ(), asBridge+"=1", "STUB_ONLY=pre-claim")
	s := &stub{cmd: cmd}
	var err error
	s.claim, err = cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s.out = bufio.NewReader(out)
	cmd.Stderr = &s.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return s
}

// status reads the stub's preload status line.
func (s *stub) status(t *testing.T) bridgeapi.PreloadStatus {
	t.Helper()
	var st bridgeapi.PreloadStatus
	require.NoError(t, bridgeapi.ReadLine(s.out, &st))
	return st
}

// run sends the claim and returns the run's stdout and exit code.
func (s *stub) run(t *testing.T, argv, env []string, dir string) (string, int) {
	t.Helper()
	c, err := bridgeapi.NewClaim(argv, env, dir, false, time.Minute, time.Now()).Encode()
	require.NoError(t, err)
	_, err = s.claim.Write(c)
	require.NoError(t, err)
	require.NoError(t, s.claim.Close())
	out, _ := io.ReadAll(s.out)
	err = s.cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func nodePreloader(t *testing.T) (node, script string) {
	t.Helper()
	node = os.Getenv("NODE24_BIN")
	testenv.Need(t, "node", node != "", "NODE24_BIN is not set (scripts/install-openclaw.sh)")
	script = filepath.Join(t.TempDir(), preload.NodeName)
	require.NoError(t, os.WriteFile(script, preload.Node, 0o644))
	return node, script
}

// TestPreloadNodeRunsESMAndCJS: the generic Node preloader, started before the claim
// with a module loaded ahead, runs an ESM and a CommonJS entry as `node ENTRY ARGS`
// would: the claim's argv, environment (only it) and directory, require.main set, the
// module loaded ahead shared, its exit code the run's. About 1 s.
func TestPreloadNodeRunsESMAndCJS(t *testing.T) {
	node, script := nodePreloader(t)
	dir := t.TempDir()
	ahead := filepath.Join(dir, "ahead.mjs")
	require.NoError(t, os.WriteFile(ahead, []byte("globalThis.loadedAhead = (globalThis.loadedAhead || 0) + 1; export const at = Date.now();\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "esm.mjs"), []byte(`
const { at } = await import(process.argv[2]);
console.log(JSON.stringify({ args: process.argv.slice(3), env: process.env, cwd: process.cwd(), ahead: globalThis.loadedAhead, earlier: at < Date.now() + 1 }));
process.exitCode = 7;
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cjs.cjs"), []byte(`console.log(JSON.stringify({ main: require.main === module, args: process.argv.slice(2) }));`), 0o644))

	s := startStub(t, nil, node, script, "--import", ahead)
	st := s.status(t)
	require.Equal(t, bridgeapi.PreloadStatusReady, st.Preload, st.Reason)
	require.NotNil(t, st.Attestation, "no attestation before the claim")
	out, code := s.run(t, []string{"node", "esm.mjs", ahead, "a b", "c"}, []string{"ONLY=this", "PATH=/usr/bin"}, dir)
	assert.Equal(t, 7, code, s.stderr.String())
	var got struct {
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		Cwd     string            `json:"cwd"`
		Ahead   int               `json:"ahead"`
		Earlier bool              `json:"earlier"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, []string{"a b", "c"}, got.Args)
	assert.Equal(t, map[string]string{"ONLY": "this", "PATH": "/usr/bin"}, got.Env, "the run's environment is the claim's only")
	assert.Equal(t, dir, got.Cwd)
	assert.Equal(t, 1, got.Ahead, "the module loaded ahead was loaded again or not at all")

	s = startStub(t, nil, node, script)
	require.Equal(t, bridgeapi.PreloadStatusReady, s.status(t).Preload)
	out, code = s.run(t, []string{"/usr/local/bin/node", filepath.Join(dir, "cjs.cjs"), "x"}, nil, "/")
	assert.Equal(t, 0, code, s.stderr.String())
	assert.JSONEq(t, `{"main":true,"args":["x"]}`, out)
}

// TestPreloadMissingEntry: a claim naming an entry the runtime does not have fails as
// a command not found, naming it; nothing ran.
func TestPreloadMissingEntry(t *testing.T) {
	node, script := nodePreloader(t)
	s := startStub(t, nil, node, script)
	require.Equal(t, bridgeapi.PreloadStatusReady, s.status(t).Preload)
	out, code := s.run(t, []string{"node", "/nonexistent/agent.mjs"}, nil, "/")
	assert.Equal(t, bridgeapi.ExitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, s.stderr.String(), bridgeapi.ExecFailedPrefix)
	assert.Contains(t, s.stderr.String(), "/nonexistent/agent.mjs")
}

// TestPreloadBadRuntime: a runtime that exits, hangs, writes to stdout before the
// claim, or dies after it said ready makes the stub say why and exit 125 before any
// claim; a claim never reaches it. A few seconds.
func TestPreloadBadRuntime(t *testing.T) {
	for name, c := range map[string]struct {
		flags []string
		argv  []string
		want  string
	}{
		"exits":     {nil, []string{"sh", "-c", "exit 3"}, "exited"},
		"hangs":     {[]string{"-preload-timeout", "300ms"}, []string{"sleep", "30"}, "not ready after 300ms"},
		"speaks":    {nil, []string{"sh", "-c", "echo hello; sleep 30"}, "wrote to stdout before the claim"},
		"not found": {nil, []string{"/nonexistent/runtime"}, "not found"},
		"bad line":  {nil, []string{"sh", "-c", `echo '{"ready":false}' >&3; sleep 30`}, "not {\"ready\":true}"},
	} {
		t.Run(name, func(t *testing.T) {
			s := startStub(t, c.flags, c.argv...)
			st := s.status(t)
			assert.Equal(t, bridgeapi.PreloadStatusFailed, st.Preload)
			assert.Contains(t, st.Reason, c.want)
			err := s.cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, bridgeapi.ExitBridgeFailed, ee.ExitCode())
		})
	}
	t.Run("dies after ready", func(t *testing.T) {
		s := startStub(t, nil, "sh", "-c", `echo '{"ready":true}' >&3; sleep 0.2; exit 0`)
		require.Equal(t, bridgeapi.PreloadStatusReady, s.status(t).Preload)
		err := s.cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, bridgeapi.ExitBridgeFailed, ee.ExitCode())
		assert.Contains(t, s.stderr.String(), bridgeapi.PreloadGone)
	})
}
