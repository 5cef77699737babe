package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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

var nodeAgent struct {
	once     sync.Once
	ref      string
	archive  []byte
	err      error
	duration time.Duration
}

// nodeAgentImage builds, once per process, the image of testdata/node-openai-agent
// with the public builder: its package.json's dependencies (openai) installed from
// the npm registry by the builder, node from NODE24_BIN or PATH.
func nodeAgentImage(t testing.TB) imageFunc {
	t.Helper()
	node := os.Getenv("NODE24_BIN")
	if node == "" {
		node, _ = exec.LookPath("node")
	}
	testenv.Need(t, "openclaw", node != "", "no node binary (NODE24_BIN or node on PATH)")
	testenv.NeedCommand(t, "openclaw", "npm")
	return func(ctx context.Context) (string, []byte, error) {
		nodeAgent.once.Do(func() {
			start := time.Now()
			img, err := agentimage.Node(ctx, agentimage.NodeApp{
				Name: "agentsandbox/test-node-openai-agent", Dir: filepath.Join("testdata", "node-openai-agent"),
				Entry: "agent.mjs", Node: node,
			})
			if err != nil {
				nodeAgent.err = err
				return
			}
			nodeAgent.ref, nodeAgent.archive, nodeAgent.err = img.Archive()
			nodeAgent.duration = time.Since(start)
		})
		return nodeAgent.ref, nodeAgent.archive, nodeAgent.err
	}
}

func TestNodeAgentImageDocker(t *testing.T)     { testNodeAgentImage(t, dockerRunnerFor) }
func TestNodeAgentImageContainerd(t *testing.T) { testNodeAgentImage(t, containerdRunnerFor) }

// testNodeAgentImage: an agent image built by agentimage.Node from a package.json that
// depends on openai (installed from npm by the builder, nothing mounted) runs through
// the facade with the image's own entrypoint; both its calls are reconciled.
func testNodeAgentImage(t *testing.T, newRunner func(testing.TB, string, imageFunc) (port.SandboxRunner, string)) {
	runner, image := newRunner(t, testenv.Bridge(t), nodeAgentImage(t))
	t.Logf("image %s built in %v", image, nodeAgent.duration)
	// The run's budget starts after the builds: the image took over 3 minutes on a
	// loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fake := litellmtest.NewServer(litellmtest.WithBatchWriteDelay(200 * time.Millisecond))
	defer fake.Close()
	sb, _ := newStack(t, runner, fake)
	res, err := sb.Run(ctx, sandbox.Request{
		Grant: sandbox.Grant{AllowSandbox: true}, RunID: sandboxtest.RunID("nodeimg"), Image: image,
		WorkspaceDir: newWorkspace(t), Model: "gpt-4o-mini",
		Attribution: port.Attribution{BillingAccountID: "acct-nodeimg"},
		Limits:      port.Limits{Timeout: 2 * time.Minute, MemoryBytes: 512 << 20},
		Reconcile:   true,
	})
	if err != nil {
		t.Fatalf("Run: %v (stdout %s, stderr %s)", err, stdout(res), stderr(res))
	}
	if res.Run.ExitCode != 0 {
		t.Fatalf("agent exit %d\nstdout: %s\nstderr: %s", res.Run.ExitCode, res.Run.Stdout, res.Run.Stderr)
	}
	ops := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(res.Run.Stdout))
	for sc.Scan() {
		var v map[string]any
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			ops[v["op"].(string)] = v
		}
	}
	for _, op := range []string{"chat", "chat_stream"} {
		if u, _ := ops[op]["usage"].(map[string]any); len(u) == 0 {
			t.Errorf("%s: %v (stdout %s)", op, ops[op], res.Run.Stdout)
		}
	}
	if res.Usage == nil || res.Usage.Total.Calls != 2 || len(res.Usage.Missing) != 0 || res.Usage.Total.TotalTokens == 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	if len(res.Audit) != 2 {
		t.Errorf("audit %+v", res.Audit)
	}
}
