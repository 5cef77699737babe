package proxydaemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/llmproxy/llmproxytest"
	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/testsupport/testenv"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/runtoken"
)

var testKeys = runtoken.Keys{Current: []byte("proxyd-test-secret-0123456789abcdef0123")}

// daemon is an in-process server with its admin API on a unix socket.
type daemon struct {
	dir    string
	srv    *proxydaemon.Server
	ln     net.Listener
	client *api.Client
}

func startDaemon(t testing.TB, dir string, mut func(*proxydaemon.Config)) *daemon {
	t.Helper()
	cfg := proxydaemon.Config{StateDir: filepath.Join(dir, "state"), SocketDir: filepath.Join(dir, "runs"), Keys: testKeys}
	if mut != nil {
		mut(&cfg)
	}
	srv, err := proxydaemon.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := proxydaemon.ListenAdmin(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeAdmin(ln)
	c, err := api.NewClient(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{dir: dir, srv: srv, ln: ln, client: c}
	t.Cleanup(d.close)
	return d
}

func (d *daemon) close() {
	d.ln.Close()
	d.srv.Close()
	d.client.Close()
}

func shortDir(t testing.TB) string { return testenv.ShortDir(t, "pxd") }

// tokenTransport is what the bridge does: every request to the run's socket
// carries the run token.
type tokenTransport struct {
	base  http.RoundTripper
	token string
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.token != "" {
		r.Header.Set(runtoken.Header, t.token)
	}
	return t.base.RoundTrip(r)
}

func runClient(sock, token string) *http.Client {
	return &http.Client{Transport: tokenTransport{token: token, base: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

func TestEngineSuite(t *testing.T) {
	llmproxytest.Test(t, func(t testing.TB, cfg llmproxytest.Config) llmproxytest.Front {
		d := startDaemon(t, shortDir(t), nil)
		m, err := api.NewManager(d.client)
		if err != nil {
			t.Fatal(err)
		}
		return &front{m: m, cfg: cfg}
	})
}

type front struct {
	m   *api.Manager
	cfg llmproxytest.Config
}

func (f *front) StartRun(t testing.TB, s llmproxytest.RunSpec) llmproxytest.Run {
	p, err := f.m.StartProxy(context.Background(), port.ProxySpec{RunID: s.RunID, Attempt: s.Attempt, Upstream: f.cfg.Upstream,
		APIKey: f.cfg.APIKey, Attribution: s.Attribution, Budget: s.Budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	reg := p.Registration()
	return llmproxytest.Run{Client: runClient(reg.SocketPath, reg.Token), BaseURL: "http://sandbox",
		Audit: func() []port.AuditRecord {
			recs, err := p.Audit(context.Background())
			if err != nil {
				t.Error(err)
			}
			return recs
		}, Stop: p.Stop}
}

const chat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"MARKER:x hi"}]}`

func register(t *testing.T, d *daemon, up *litellmtest.Server, runID string, mut func(*api.RegisterRequest)) api.Registered {
	t.Helper()
	req := api.RegisterRequest{RunID: runID, Attempt: 1, Upstream: up.URL, APIKey: up.MasterKey(),
		Attribution: proxydapi.Attribution{BillingAccountID: "acct-" + runID}}
	if mut != nil {
		mut(&req)
	}
	reg, err := d.client.Register(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func post(t *testing.T, c *http.Client, body string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Post("http://sandbox/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRunTokenRefusals: on its socket a run needs its own token; refusals are
// 401, audited, and never reach the upstream.
func TestRunTokenRefusals(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	d := startDaemon(t, shortDir(t), nil)
	a := register(t, d, up, "run-a", nil)
	b := register(t, d, up, "run-b", nil)
	if tok, err := os.ReadFile(filepath.Join(a.SocketDir, api.TokenFile)); err != nil || string(tok) != a.Token {
		t.Fatalf("token file: %q %v", tok, err)
	}
	other, _ := runtoken.Mint([]byte("another-secret-0123456789abcdef-0123456"), "run-a", 1, time.Now().Add(time.Hour))
	for name, tok := range map[string]string{"none": "", "another run's": b.Token, "another secret's": other, "garbage": "x|y"} {
		resp, body := post(t, runClient(a.SocketPath, tok), chat)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "run_token") {
			t.Errorf("%s token: %d %s", name, resp.StatusCode, body)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("refused calls reached the upstream: %d", n)
	}
	resp, body := post(t, runClient(a.SocketPath, a.Token), chat)
	if resp.StatusCode != 200 || !strings.Contains(body, "ECHO:x") {
		t.Fatalf("own token: %d %s", resp.StatusCode, body)
	}
	out, err := d.client.Deregister(context.Background(), a.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var blocked []string
	for _, r := range out.Audit {
		if r.Blocked != "" {
			blocked = append(blocked, r.Blocked)
		}
	}
	want := map[string]bool{"run_token: empty": true, "run_token: wrong_run": true, "run_token: bad_signature": true, "run_token: malformed": true}
	if len(out.Audit) != 5 || len(blocked) != 4 {
		t.Fatalf("audit %+v", out.Audit)
	}
	for _, b := range blocked {
		if !want[b] {
			t.Errorf("unexpected refusal %q", b)
		}
	}
	if _, err := os.Stat(a.SocketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left after deregistration: %v", err)
	}
	if _, err := d.client.Deregister(context.Background(), a.ID, 0); !errors.Is(err, port.ErrNotFound) {
		t.Errorf("second deregistration: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	d := startDaemon(t, shortDir(t), nil)
	a := register(t, d, up, "run-rate", func(r *api.RegisterRequest) { r.Rate = &api.RateLimit{RPS: 0.01, Burst: 2} })
	c := runClient(a.SocketPath, a.Token)
	for i := range 2 {
		if resp, body := post(t, c, chat); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := post(t, c, chat)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "rate_limit") {
		t.Fatalf("call 3: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	var e struct{ Error struct{ Type string } }
	if json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "rate_limit_exceeded" {
		t.Errorf("429 body is not the API's error JSON: %s", body)
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("upstream saw %d calls, want 2", n)
	}
	page, err := d.client.Audit(context.Background(), a.ID, 0)
	if err != nil || len(page.Records) != 3 || page.Records[2].Blocked != "rate_limited" || page.Records[2].Status != 429 {
		t.Fatalf("audit %+v %v", page, err)
	}
}

// TestRestartKeepsRunsAndBudgets: a closed daemon opened again serves the same
// run at the same socket path with the same token, its audit and budget intact.
func TestRestartKeepsRunsAndBudgets(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	dir := shortDir(t)
	d := startDaemon(t, dir, nil)
	a := register(t, d, up, "run-restart", func(r *api.RegisterRequest) { r.Budget.MaxCalls = 3 })
	c := runClient(a.SocketPath, a.Token)
	for range 2 {
		if resp, body := post(t, c, chat); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	d.close()
	if _, err := c.Post("http://sandbox/v1/chat/completions", "application/json", strings.NewReader(chat)); err == nil {
		t.Fatal("the closed daemon still answered")
	}
	d2 := startDaemon(t, dir, nil)
	runs, err := d2.client.List(context.Background())
	if err != nil || len(runs) != 1 || runs[0].ID != a.ID || runs[0].SocketDir != a.SocketDir || runs[0].Calls != 2 {
		t.Fatalf("runs after restart: %+v %v", runs, err)
	}
	c = runClient(a.SocketPath, a.Token)
	if resp, body := post(t, c, chat); resp.StatusCode != 200 {
		t.Fatalf("call 3 after restart: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, c, chat); resp.StatusCode != 429 || !strings.Contains(body, "budget") {
		t.Fatalf("call 4 after restart: %d %s, want the budget's 429", resp.StatusCode, body)
	}
	out, err := d2.client.Deregister(context.Background(), a.ID, time.Second)
	if err != nil || len(out.Audit) != 4 || out.Audit[0].Status != 200 || out.Audit[3].Blocked == "" {
		t.Fatalf("audit after restart: %+v %v", out, err)
	}
}

func TestCorruptRegistryIsAClearError(t *testing.T) {
	dir := shortDir(t)
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	os.WriteFile(filepath.Join(dir, "state", proxydaemon.DBName), []byte(strings.Repeat("garbage!", 100)), 0o600)
	_, err := proxydaemon.Open(context.Background(), proxydaemon.Config{StateDir: filepath.Join(dir, "state"), SocketDir: filepath.Join(dir, "runs"), Keys: testKeys})
	if !errors.Is(err, identity.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestAdminRefusesBadRequests(t *testing.T) {
	d := startDaemon(t, shortDir(t), nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(d.dir, "admin.sock"))
	}}}
	for name, body := range map[string]string{
		"unknown field": `{"run_id":"r","api_key":"k","upstream":"http://x","attribution":{"BillingAccountID":"a"},"evil":1}`,
		"trailing":      `{"run_id":"r"} {}`,
		"not json":      `run_id=r`,
		"huge":          `{"run_id":"` + strings.Repeat("r", api.MaxRequestBytes) + `"}`,
		"bad run":       `{"run_id":"../x","api_key":"k","upstream":"http://127.0.0.1:1","attribution":{"BillingAccountID":"a"}}`,
	} {
		resp, err := hc.Post("http://proxyd"+api.PathRuns, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ae api.APIError
		json.NewDecoder(resp.Body).Decode(&ae)
		resp.Body.Close()
		if resp.StatusCode != 400 || ae.Code != "invalid_spec" {
			t.Errorf("%s: %d %+v", name, resp.StatusCode, ae)
		}
	}
	if fi, err := os.Stat(filepath.Join(d.dir, "admin.sock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode: %v %v", fi.Mode(), err)
	}
	if n := d.srv.Runs(); n != 0 {
		t.Errorf("%d runs registered by bad requests", n)
	}
}

// TestClosedDaemonAnswersUnavailable: a registration the closing daemon refuses
// reaches the client as port.ErrUnavailable (the error table's two halves agree).
func TestClosedDaemonAnswersUnavailable(t *testing.T) {
	d := startDaemon(t, shortDir(t), nil)
	if err := d.srv.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := d.client.Register(context.Background(), api.RegisterRequest{RunID: "run-closed", Attempt: 1,
		Upstream: "http://127.0.0.1:1", APIKey: "k", Attribution: proxydapi.Attribution{BillingAccountID: "acct"}})
	if !errors.Is(err, port.ErrUnavailable) || errors.Is(err, port.ErrInternal) {
		t.Fatalf("register on a closed daemon: %v, want ErrUnavailable", err)
	}
}

func FuzzDecodeRegister(f *testing.F) {
	f.Add(`{"run_id":"r","attempt":1,"upstream":"http://127.0.0.1:4000","api_key":"k","attribution":{"BillingAccountID":"a"},"budget":{"MaxCalls":3}}`)
	f.Add(`{"run_id":"r","rate":{"rps":1e309,"burst":-1}}`)
	f.Add(`{"sandbox_uid":-5}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		req, err := proxydaemon.DecodeRegister(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, port.ErrInvalidSpec) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Whatever decodes either validates or is refused with a typed error.
		if _, verr := proxydaemon.Validate(req); verr != nil && !errors.Is(verr, port.ErrInvalidSpec) {
			t.Fatalf("untyped validation error %v", verr)
		}
	})
}

// TestAdminChecksThePeer: even with the socket's mode opened up, a process of
// another uid is disconnected by the SO_PEERCRED check before any HTTP.
func TestAdminChecksThePeer(t *testing.T) {
	socat := testenv.NeedCommand(t, "socat", "socat")
	if os.Geteuid() != 0 {
		testenv.Need(t, "root", false, "running a client as another uid needs root")
	}
	d := startDaemon(t, shortDir(t), nil)
	sock := filepath.Join(d.dir, "admin.sock")
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ask := func(uid uint32) string {
		cmd := exec.Command(socat, "-t", "5", "-", "UNIX-CONNECT:"+sock)
		cmd.Stdin = strings.NewReader("GET /v1/health HTTP/1.0\r\n\r\n")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := ask(0); !strings.Contains(out, "200 OK") || !strings.Contains(out, `"status":"ok"`) {
		t.Fatalf("the daemon's own uid was not served: %q", out)
	}
	if out := ask(1001); strings.Contains(out, "HTTP/") {
		t.Errorf("uid 1001 got an answer: %q", out)
	}
}

// TestExpiredRegistrationIsCollected: a run not seen for the TTL is removed by
// the GC, its socket directory with it.
func TestExpiredRegistrationIsCollected(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	d := startDaemon(t, shortDir(t), func(c *proxydaemon.Config) {
		c.TTL, c.GCInterval, c.FlushInterval = 300*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	})
	a := register(t, d, up, "run-ttl", nil)
	b := register(t, d, up, "run-busy", nil)
	cb := runClient(b.SocketPath, b.Token)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := cb.Get("http://sandbox/health") // keeps b alive
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		runs, _ := d.client.List(context.Background())
		if len(runs) == 1 {
			if runs[0].ID != b.ID {
				t.Fatalf("GC kept %+v, want run-busy", runs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run-ttl was not collected: %+v", runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The daemon removes the directory right after the registry let the run go.
	for {
		_, err := os.Stat(a.SocketDir)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired run's directory is left: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNetworkSandboxes: a sandbox on an internal network is found by its source
// IP; an X-Sandbox-ID must match name, start time and session token; a restart
// (new start time) registers anew with a fresh budget; other addresses are refused.
func TestNetworkSandboxes(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	d := startDaemon(t, shortDir(t), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go d.srv.ServeNetwork(ln)
	start := time.Now().UTC().Truncate(time.Millisecond)
	net1 := &api.NetworkIdentity{IP: "127.0.0.1", Name: "repo-feature", StartTime: start, SessionToken: "token123"}
	first := register(t, d, up, "run-net", func(r *api.RegisterRequest) { r.Network = net1; r.Budget.MaxCalls = 1 })
	if first.SocketDir != "" || first.Token != "" {
		t.Errorf("a network registration got a socket or token: %+v", first)
	}
	from := func(src string) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext(ctx, "tcp", addr)
		}}}
	}
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	callAs := func(c *http.Client, sid string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(chat))
		req.Header.Set("Content-Type", "application/json")
		if sid != "" {
			req.Header.Set(api.HeaderSandboxID, sid)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := "repo-feature:" + start.Format(time.RFC3339Nano) + ":token123"
	c := from("127.0.0.1")
	if st, body := callAs(c, "repo-feature:"+start.Format(time.RFC3339Nano)+":token999"); st != 401 || !strings.Contains(body, "sandbox_id") {
		t.Errorf("wrong session token: %d %s", st, body)
	}
	if st, body := callAs(c, good); st != 200 {
		t.Fatalf("good identity: %d %s", st, body)
	}
	if st, _ := callAs(c, ""); st != 429 {
		t.Errorf("the header is optional but the budget holds: %d", st)
	}
	if st, body := callAs(from("127.0.0.2"), ""); st != 403 {
		t.Errorf("an unregistered address: %d %s", st, body)
	}
	// The sandbox restarts: new start time and token; a fresh registration and budget.
	net2 := &api.NetworkIdentity{IP: "127.0.0.1", Name: "repo-feature", StartTime: start.Add(time.Minute), SessionToken: "token456"}
	second := register(t, d, up, "run-net", func(r *api.RegisterRequest) { r.Network = net2; r.Budget.MaxCalls = 1 })
	if second.Restarted != first.ID {
		t.Fatalf("restart not detected: %+v", second)
	}
	if st, body := callAs(c, good); st != 401 {
		t.Errorf("the old identity after the restart: %d %s", st, body)
	}
	if st, body := callAs(c, "repo-feature:"+net2.StartTime.Format(time.RFC3339Nano)+":token456"); st != 200 {
		t.Errorf("the new identity: %d %s", st, body)
	}
	// The session token is stored only as a hash.
	db, _ := os.ReadFile(filepath.Join(d.dir, "state", proxydaemon.DBName))
	wal, _ := os.ReadFile(filepath.Join(d.dir, "state", proxydaemon.DBName+"-wal"))
	if strings.Contains(string(db)+string(wal), "token456") {
		t.Error("a session token is in the registry file")
	}
}

// TestRunTokenBoundToRegistration: a run token works only for the registration
// it was minted for, not for a new registration of the same run id and attempt
// (even one made within the same second); refused at the proxy, the upstream
// sees nothing.
func TestRunTokenBoundToRegistration(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	d := startDaemon(t, shortDir(t), nil)
	old := register(t, d, up, "run-again", nil)
	if _, err := d.client.Deregister(context.Background(), old.ID, 0); err != nil {
		t.Fatal(err)
	}
	cur := register(t, d, up, "run-again", nil)
	if cur.Token == old.Token {
		t.Fatal("the new registration got the old one's token")
	}
	resp, body := post(t, runClient(cur.SocketPath, old.Token), chat)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "other_registration") {
		t.Errorf("the earlier registration's token: %d %s", resp.StatusCode, body)
	}
	if n := up.RequestCount("/v1/chat/completions"); n != 0 {
		t.Errorf("the upstream saw %d calls", n)
	}
	if resp, body := post(t, runClient(cur.SocketPath, cur.Token), chat); resp.StatusCode != http.StatusOK {
		t.Errorf("the registration's own token: %d %s", resp.StatusCode, body)
	}
}

// TestDaemonHeldUpstreamKey: with UpstreamKey the daemon injects its own key (a
// rotated one from the next registration on), refuses registrations that carry a
// key, and says so without the key in the error when it cannot read it.
func TestDaemonHeldUpstreamKey(t *testing.T) {
	up := litellmtest.NewServer()
	defer up.Close()
	key := up.MasterKey()
	var readErr error
	d := startDaemon(t, shortDir(t), func(c *proxydaemon.Config) {
		c.UpstreamKey = func() (string, error) { return key, readErr }
	})
	if _, err := d.client.Register(context.Background(), api.RegisterRequest{RunID: "carries", Attempt: 1, Upstream: up.URL, APIKey: "sk-from-the-host",
		Attribution: proxydapi.Attribution{BillingAccountID: "acct"}}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Fatalf("a registration carrying a key: %v, want ErrInvalidSpec", err)
	}
	a := register(t, d, up, "held", func(r *api.RegisterRequest) { r.APIKey = "" })
	if resp, body := post(t, runClient(a.SocketPath, a.Token), chat); resp.StatusCode != 200 || !strings.Contains(body, "ECHO:x") {
		t.Fatalf("a call with the daemon's key: %d %s", resp.StatusCode, body)
	}
	key = "sk-rotated-not-the-master"
	b := register(t, d, up, "rotated", func(r *api.RegisterRequest) { r.APIKey = "" })
	if resp, _ := post(t, runClient(b.SocketPath, b.Token), chat); resp.StatusCode == 200 {
		t.Error("the rotated (wrong) key was not used for the next registration")
	}
	readErr = errors.New("/keys/litellm: permission denied")
	_, err := d.client.Register(context.Background(), api.RegisterRequest{RunID: "unreadable", Attempt: 1, Upstream: up.URL,
		Attribution: proxydapi.Attribution{BillingAccountID: "acct"}})
	if !errors.Is(err, port.ErrUnavailable) || strings.Contains(err.Error(), key) {
		t.Errorf("an unreadable key: %v, want ErrUnavailable without the key", err)
	}
}
