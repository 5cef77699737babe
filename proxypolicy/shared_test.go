package proxypolicy_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
	"github.com/agentsandbox/sandbox/runtoken"
	"github.com/agentsandbox/sandbox/runtoken/runtokentest"
)

func sharedPolicy(t *testing.T, runID string) *proxypolicy.Policy {
	p, err := proxypolicy.NewPolicy(port.ProxySpec{RunID: runID, Attempt: runtokentest.Attempt, APIKey: "unused-key",
		Attribution: port.Attribution{BillingAccountID: "acct-" + runID, SessionID: `s"1`}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedNginxAnswersLikeTheGoVerifier runs the rendered shared proxy in the
// real nginx (validated with nginx -t first) and presents every vector of the
// run-token table on a run's socket: nginx accepts and refuses exactly as
// runtoken.Verifier does, with the same reasons; accepted calls reach the
// upstream with the key and attribution and without the token.
func TestSharedNginxAnswersLikeTheGoVerifier(t *testing.T) {
	nginx := testenv.NeedCommand(t, "nginx", "nginx")
	_, err := os.Stat(proxypolicy.DefaultNJSModule)
	testenv.Need(t, "nginx", err == nil, "the njs module is missing (apt-get install libnginx-mod-http-js; scripts/setup.sh does)")

	const key = "sk-shared-canary-41"
	var mu sync.Mutex
	var seen []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()

	dir, err := os.MkdirTemp("", "ngxs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	conf, script, err := proxypolicy.RenderShared(proxypolicy.SharedConfig{
		Runs: []proxypolicy.SharedRun{
			{Policy: sharedPolicy(t, runtokentest.Run), Attempt: runtokentest.Attempt, Socket: sockA},
			{Policy: sharedPolicy(t, runtokentest.Other), Attempt: runtokentest.Attempt, Socket: sockB},
		},
		Upstream: up.URL, RuntimeDir: dir, ScriptPath: filepath.Join(dir, "runtoken.js"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf)+string(script), key) || strings.Contains(string(conf)+string(script), "unused-key") {
		t.Fatal("a key is in the rendered files")
	}
	confPath := filepath.Join(dir, "nginx.conf")
	os.WriteFile(confPath, conf, 0o600)
	os.WriteFile(filepath.Join(dir, "runtoken.js"), script, 0o644)
	env := append(os.Environ(), "PROXYD_SECRET="+hex.EncodeToString(runtokentest.Current),
		"PROXYD_PREVIOUS_SECRET="+hex.EncodeToString(runtokentest.Previous), "LITELLM_API_KEY="+key)
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
	cmd.Env = env
	// Its own process group: nginx's workers outlive a killed master, so the whole
	// group is stopped (gracefully, then killed) and none is left running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}()

	client := func(sock string) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	}
	ca := client(sockA)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := ca.Get("http://shared/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx does not answer: %v\n%s", err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}

	now := time.Now()
	v, err := runtoken.NewVerifier(runtoken.Keys{Current: runtokentest.Current, Previous: runtokentest.Previous})
	if err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, vec := range runtokentest.Vectors(now) {
		_, gerr := v.VerifyFor(vec.Token, vec.SocketRun, vec.SocketAttempt)
		goAnswer := "ok"
		var te *runtoken.Error
		if errors.As(gerr, &te) {
			goAnswer = string(te.Reason)
		}
		if goAnswer != orOK(vec.Want) {
			t.Fatalf("%s: the Go verifier says %s, the table %s", vec.Name, goAnswer, orOK(vec.Want))
		}
		req, _ := http.NewRequest(http.MethodPost, "http://shared/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Content-Type", "application/json")
		if vec.Token != "" {
			req.Header.Set(runtoken.Header, vec.Token)
		}
		resp, err := ca.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", vec.Name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ngxAnswer := "ok"
		if resp.StatusCode == http.StatusUnauthorized {
			var e struct{ Error struct{ Message string } }
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%s: 401 body is not JSON: %s", vec.Name, body)
			}
			ngxAnswer = strings.TrimPrefix(e.Error.Message, "run_token: ")
		} else if resp.StatusCode != 200 {
			t.Fatalf("%s: nginx answered %d %s", vec.Name, resp.StatusCode, body)
		} else {
			accepted++
		}
		if ngxAnswer != goAnswer {
			t.Errorf("%s: nginx says %s, Go says %s", vec.Name, ngxAnswer, goAnswer)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != accepted || accepted == 0 {
		t.Fatalf("the upstream saw %d calls, want the %d accepted", len(seen), accepted)
	}
	for _, h := range seen {
		if h.Get("Authorization") != "Bearer "+key || h.Get("X-Litellm-End-User-Id") != "acct-"+runtokentest.Run || h.Get(runtoken.Header) != "" {
			t.Errorf("upstream headers %v", h)
		}
		var md map[string]any
		if err := json.Unmarshal([]byte(h.Get("X-Litellm-Spend-Logs-Metadata")), &md); err != nil || md["run_id"] != runtokentest.Run || md["session_id"] != `s"1` {
			t.Errorf("metadata %q: %v", h.Get("X-Litellm-Spend-Logs-Metadata"), err)
		}
	}
}

func orOK(r runtoken.Reason) string {
	if r == "" {
		return "ok"
	}
	return string(r)
}

func TestRenderSharedRefusesBadInput(t *testing.T) {
	p := sharedPolicy(t, "r1")
	good := proxypolicy.SharedConfig{Runs: []proxypolicy.SharedRun{{Policy: p, Socket: "/run/p/a.sock"}}, Upstream: "http://127.0.0.1:4000",
		RuntimeDir: "/run/p", ScriptPath: "/run/p/t.js"}
	if _, _, err := proxypolicy.RenderShared(good); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*proxypolicy.SharedConfig){
		"socket with ;":   func(c *proxypolicy.SharedConfig) { c.Runs[0].Socket = "/run/p/a;b.sock" },
		"relative socket": func(c *proxypolicy.SharedConfig) { c.Runs[0].Socket = "a.sock" },
		"upstream path":   func(c *proxypolicy.SharedConfig) { c.Upstream = "http://127.0.0.1:4000/x" },
		"upstream https":  func(c *proxypolicy.SharedConfig) { c.Upstream = "https://h" },
		"runtime dir $":   func(c *proxypolicy.SharedConfig) { c.RuntimeDir = "/run/$p" },
		"no runs":         func(c *proxypolicy.SharedConfig) { c.Runs = nil },
		"no policy":       func(c *proxypolicy.SharedConfig) { c.Runs[0].Policy = nil },
	} {
		c := good
		c.Runs = append([]proxypolicy.SharedRun(nil), good.Runs...)
		mut(&c)
		if _, _, err := proxypolicy.RenderShared(c); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
