package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

var pyAgent struct {
	once    sync.Once
	ref     string
	archive []byte
	err     error
}

func pythonAgentImage(t testing.TB) imageFunc {
	_, err := os.Stat("/usr/lib/python3/dist-packages/yaml/__init__.py")
	testenv.Need(t, "python", err == nil, "Debian's python3 and python3-yaml are not installed (scripts/install-python.sh)")
	return func(ctx context.Context) (string, []byte, error) {
		pyAgent.once.Do(func() {
			img, err := agentimage.Python(ctx, agentimage.PythonApp{
				Name: "agentsandbox/test-python-agent", Dir: filepath.Join("testdata", "python-agent"), Entry: "agent.py",
			})
			if err != nil {
				pyAgent.err = err
				return
			}
			pyAgent.ref, pyAgent.archive, pyAgent.err = img.Archive()
		})
		return pyAgent.ref, pyAgent.archive, pyAgent.err
	}
}

func TestPythonAgentImageDocker(t *testing.T)     { testPythonAgentImage(t, dockerRunnerFor) }
func TestPythonAgentImageContainerd(t *testing.T) { testPythonAgentImage(t, containerdRunnerFor) }

// testPythonAgentImage: a Python agent built by agentimage.Python (Debian's python3,
// the yaml module its script imports found by the builder) runs with the image's own
// entrypoint and calls the LLM through the proxy; the call is reconciled.
func testPythonAgentImage(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	runner, image := newRunner(t, testenv.Bridge(t), pythonAgentImage(t))
	// The run's budget starts after the builds (see testNodeAgentImage).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("pyimg"), Image: image,
		WorkspaceDir: newWorkspace(t), Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-pyimg"},
		Limits:      port.Limits{Timeout: time.Minute, MemoryBytes: 256 << 20},
		Reconcile:   true,
	})
	if err != nil {
		t.Fatalf("Run: %v (stdout %s, stderr %s)", err, stdout(res), stderr(res))
	}
	if res.Run.ExitCode != 0 || !strings.Contains(res.Text, "answer: ECHO:from-python") || !strings.Contains(res.Text, "tokens: ") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.Run.ExitCode, res.Run.Stdout, res.Run.Stderr)
	}
	if res.Usage == nil || res.Usage.Total.Calls != 1 || len(res.Usage.Missing) != 0 {
		t.Errorf("usage %+v", res.Usage)
	}
}
