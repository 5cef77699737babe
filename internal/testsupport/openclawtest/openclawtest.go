// Package openclawtest starts the real OpenClaw gateway for tests: a config from
// the project's own builder, private state and home directories, loopback only,
// and a handshake before the test goes on. It needs OPENCLAW_BIN (and NODE24_BIN
// when node on PATH is older than 24), which scripts/install-openclaw.sh prints;
// without them the test skips, or fails when SANDBOX_REQUIRE asks for openclaw.
package openclawtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
)

// Gateway is a running `openclaw gateway` owned by one test.
type Gateway struct {
	// URL is the gateway's WebSocket address on loopback.
	URL string
	// Token is the gateway's auth token.
	Token string
	// Config is the config the gateway runs.
	Config *openclaw.Config
	log    *testenv.SyncBuffer
}

// Log returns what the gateway printed so far.
func (g *Gateway) Log() string { return g.log.String() }

// StartGateway starts a gateway whose config is openclaw.NewConfig with gateway mode
// on a free loopback port, a workspace in a temporary directory, and opts (models
// and base URL at least). It returns once a client completes a handshake; the
// gateway is stopped when the test ends.
func StartGateway(t testing.TB, opts ...openclaw.Option) *Gateway {
	t.Helper()
	bin := os.Getenv("OPENCLAW_BIN")
	testenv.Need(t, "openclaw", bin != "", "OPENCLAW_BIN is not set (scripts/install-openclaw.sh installs openclaw and prints it)")

	dir := t.TempDir()
	for _, d := range []string{"state", "home", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	port := testenv.FreePort(t)
	gw := &Gateway{URL: fmt.Sprintf("ws://127.0.0.1:%d", port), Token: "test-" + strings.Repeat("k", 24), log: &testenv.SyncBuffer{}}
	cfg, err := openclaw.NewConfig(append([]openclaw.Option{
		openclaw.WithGateway(openclaw.Gateway{Port: port, Bind: "loopback", Token: gw.Token}),
		openclaw.WithWorkspace(filepath.Join(dir, "workspace")),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gw.Config = cfg
	cfgPath := filepath.Join(dir, "openclaw.json")
	if err := cfg.WriteFile(cfgPath); err != nil {
		t.Fatal(err)
	}

	path := os.Getenv("PATH")
	if node := os.Getenv("NODE24_BIN"); node != "" {
		path = filepath.Dir(node) + string(os.PathListSeparator) + path // the launcher runs `node`
	}
attempts:
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(bin, "gateway", "--port", fmt.Sprint(port), "--bind", "loopback")
		cmd.Env = append(os.Environ(),
			"PATH="+path,
			"OPENCLAW_CONFIG_PATH="+cfgPath,
			"OPENCLAW_STATE_DIR="+filepath.Join(dir, "state"),
			"HOME="+filepath.Join(dir, "home"),
			"TMPDIR="+filepath.Join(dir, "tmp"),
			"OPENCLAW_DISABLE_BONJOUR=1",
			"OPENCLAW_NO_AUTO_UPDATE=1",
			"OPENCLAW_SKIP_CHANNELS=1",
		)
		cmd.Stdout, cmd.Stderr = gw.log, gw.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			// SIGTERM lets the gateway stop its own helpers; SIGKILL the group we
			// created if it does not finish in time.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			}
			if t.Failed() {
				t.Logf("openclaw gateway output:\n%s", gw.log.String())
			}
		})

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second) // a readiness wait: a loaded machine starts it slowly
		defer cancel()
		for {
			c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token), gateway.WithRetry(1, 0))
			if err == nil {
				_ = c.Close()
				return gw
			}
			select {
			case <-exited:
				// OpenClaw gives its state lease worker a fixed 5 s to start and exits when a
				// loaded machine takes longer: that is its start-up, not what the tests
				// check, so the gateway is started again (a few times at most).
				if attempt < 3 && strings.Contains(gw.log.String(), leaseTimeout) {
					t.Logf("openclaw gateway start %d: its state lease start-up timed out; starting it again", attempt)
					continue attempts
				}
				t.Fatalf("openclaw gateway exited during start-up: %v\n%s", err, gw.log.String())
			case <-ctx.Done():
				t.Fatalf("openclaw gateway not ready: %v\n%s", err, gw.log.String())
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
}

// leaseTimeout is what OpenClaw prints when its state lease worker missed its fixed
// start-up deadline.
const leaseTimeout = "state lease heartbeat did not become ready"

// MarkerRE finds the marker a test puts in its prompts: MARKER=<capitals>.
var MarkerRE = regexp.MustCompile(`MARKER=([A-Z]+)`)

// MarkerReply is a litellmtest reply: "ANSWER-<marker>" for the one marker found
// anywhere in the conversation (OpenClaw wraps the user message, so no position is
// assumed), "CONFUSED" when there is none or more than one.
func MarkerReply(req litellmtest.ChatRequest) litellmtest.Reply {
	found := map[string]bool{}
	for _, m := range req.Messages {
		for _, s := range MarkerRE.FindAllStringSubmatch(m.Content, -1) {
			found[s[1]] = true
		}
	}
	if len(found) != 1 {
		return litellmtest.Reply{Content: "CONFUSED"}
	}
	for m := range found {
		return litellmtest.Reply{Content: "ANSWER-" + m}
	}
	return litellmtest.Reply{}
}
