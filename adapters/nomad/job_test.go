package nomad

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// TestJobLockdown checks the job a spec becomes, field by field, without a cluster:
// the lockdown of the docker driver's config, the sidecar's, and where the key is not.
func TestJobLockdown(t *testing.T) {
	r, err := NewRunner(WithAddress("http://127.0.0.1:1"), WithOwner("unit"), WithBridge("/opt/bridge"), WithInit("/opt/init"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Start(context.Background(), port.ProxySpec{RunID: "r1", Upstream: "http://127.0.0.1:4000", APIKey: "sk-canary-unit",
		Attribution: port.Attribution{BillingAccountID: "acct"}})
	if err != nil {
		t.Fatal(err)
	}
	sock := p.Socket()
	spec := port.RunSpec{RunID: "r1", Image: "img", Argv: []string{"/agent", "x"}, Env: map[string]string{"A": "1"}, LLM: &sock,
		Limits: port.Limits{MemoryBytes: 100 << 20, PIDs: 50, OpenFiles: 200, Timeout: time.Minute}}.WithDefaults()
	now := time.Now()
	job := r.buildJob(spec, jobSpec{id: "agentsandbox-r1-x", meta: meta("unit", "r1", now), created: now, proxy: true})
	if *job.Type != "batch" || job.Meta[port.LabelOwner] != "unit" || job.Meta[port.LabelRunID] != "r1" {
		t.Errorf("job type %s meta %v", *job.Type, job.Meta)
	}
	tg := job.TaskGroups[0]
	if *tg.RestartPolicy.Attempts != 0 || *tg.ReschedulePolicy.Attempts != 0 {
		t.Error("a sandbox may restart or reschedule")
	}
	agent, sidecar := tg.Tasks[0], tg.Tasks[1]
	c := agent.Config
	want := map[string]any{"network_mode": "none", "readonly_rootfs": true, "pids_limit": int64(50), "hostname": "sandbox", "ipc_mode": "private"}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("agent %s = %v, want %v", k, c[k], v)
		}
	}
	if !slices.Equal(c["cap_drop"].([]string), []string{"ALL"}) || !slices.Equal(c["security_opt"].([]string), []string{"no-new-privileges"}) {
		t.Errorf("caps %v security %v", c["cap_drop"], c["security_opt"])
	}
	if u := c["ulimit"].([]map[string]string)[0]["nofile"]; u != "200:200" {
		t.Errorf("nofile %s", u)
	}
	if agent.User != port.DefaultUser || *agent.Resources.MemoryMB != 100 {
		t.Errorf("user %s memory %d", agent.User, *agent.Resources.MemoryMB)
	}
	ep := strings.Join(c["entrypoint"].([]string), " ")
	// Nomad's three directories are bound under the runtime's mask.
	for k, want := range map[string]string{"NOMAD_ALLOC_DIR": hiddenAllocDir, "NOMAD_TASK_DIR": hiddenTaskDir, "NOMAD_SECRETS_DIR": hiddenSecretsDir} {
		if agent.Env[k] != want || !strings.HasPrefix(want, hiddenAllocDir) {
			t.Errorf("%s = %q, want %s (hidden)", k, agent.Env[k], want)
		}
	}
	if lc := agent.LogConfig; lc == nil || (lc.Disabled != nil && *lc.Disabled) || *lc.MaxFiles**lc.MaxFileSizeMB > 100 {
		t.Errorf("the sandbox's logs %+v: not collected, or not bounded", lc)
	}
	if lg := c["logging"].([]map[string]any)[0]; lg["type"] != "local" || lg["config"].([]map[string]string)[0]["max-file"] != "2" {
		t.Errorf("docker logging %v, want the local driver, bounded", lg)
	}
	for _, w := range []string{initTarget + " -unwritable " + hiddenAllocDir + "," + hiddenTaskDir + "," + hiddenSecretsDir + " -keep A,AGENTSANDBOX_ATTEST_KEY,ANTHROPIC_API_KEY,ANTHROPIC_BASE_URL,HOSTNAME,OPENAI_API_BASE,OPENAI_API_KEY,OPENAI_BASE_URL -capture -max ",
		"-flushed " + flushedTarget("stdout") + "," + flushedTarget("stderr"), "-wait /llm-sock/llm.sock", bridgeTarget + " -subreaper -attest", "-- /agent x"} {
		if !strings.Contains(ep, w) {
			t.Errorf("entrypoint %q lacks %q", ep, w)
		}
	}
	// The bridge's attestation key is in the agent task's environment for the init
	// to pass to the bridge (which takes it out), and in the sidecar's config.
	if !bridgeapi.ValidAttestKey(sock.AttestKey) || agent.Env[bridgeapi.AttestKeyEnv] != sock.AttestKey {
		t.Errorf("the bridge's attestation key: socket %q, task env %q", sock.AttestKey, agent.Env[bridgeapi.AttestKeyEnv])
	}
	if b, err := json.Marshal(SidecarConfig{ProxySpec: port.ProxySpec{RunID: "r1"}, AttestKey: sock.AttestKey}); err != nil ||
		!strings.Contains(string(b), `"RunID":"r1"`) || !strings.Contains(string(b), `"attest_key":"`+sock.AttestKey+`"`) {
		t.Errorf("sidecar config %s %v", b, err)
	}
	var targets []string
	for _, m := range c["mount"].([]map[string]any) {
		targets = append(targets, m["target"].(string))
		if m["target"] == port.LLMSocketDir && (m["source"] != "../alloc/tmp" || m["readonly"] != true) {
			t.Errorf("socket mount %v", m)
		}
		if src, _ := m["source"].(string); strings.HasPrefix(src, "../alloc/logs") && m["readonly"] != true {
			t.Errorf("a log file mounted writable: %v", m)
		}
	}
	for _, w := range []string{"/tmp", "/run", "/etc/resolv.conf", port.LLMSocketDir, bridgeTarget, initTarget, flushedTarget("stdout"), flushedTarget("stderr")} {
		if !slices.Contains(targets, w) {
			t.Errorf("no mount at %s: %v", w, targets)
		}
	}
	if sidecar.Lifecycle == nil || sidecar.Lifecycle.Hook != "prestart" || !sidecar.Lifecycle.Sidecar || sidecar.User != sidecarUser {
		t.Errorf("sidecar lifecycle %+v user %s", sidecar.Lifecycle, sidecar.User)
	}
	if sidecar.Config["network_mode"] != "host" || !slices.Equal(sidecar.Config["cap_drop"].([]string), []string{"ALL"}) {
		t.Errorf("sidecar config %v", sidecar.Config)
	}
	// The key is in no part of the job: it travels in a variable.
	for _, task := range tg.Tasks {
		for k, v := range task.Env {
			if strings.Contains(v, "sk-canary") {
				t.Errorf("task %s env %s holds the key", task.Name, k)
			}
		}
		for _, tmpl := range task.Templates {
			if strings.Contains(*tmpl.EmbeddedTmpl, "sk-canary") {
				t.Errorf("task %s template holds the key", task.Name)
			}
		}
		if strings.Contains(strings.Join(stringsOf(task.Config), " "), "sk-canary") {
			t.Errorf("task %s config holds the key", task.Name)
		}
	}
}

func stringsOf(m map[string]any) []string {
	var out []string
	for _, v := range m {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

// TestRefusedSpecs: what the runner cannot express is refused before anything is made.
func TestRefusedSpecs(t *testing.T) {
	r, err := NewRunner(WithAddress("http://127.0.0.1:1"), WithBridge("/opt/bridge"), WithHostPaths(false))
	if err != nil {
		t.Fatal(err)
	}
	base := port.RunSpec{RunID: "r1", Image: "img", Argv: []string{"/agent"}}
	for name, c := range map[string]struct {
		mut  func(*port.RunSpec)
		want error
	}{
		"internal network": {func(s *port.RunSpec) { s.Network.Internal = "net" }, port.ErrUnsupported},
		"half a core":      {func(s *port.RunSpec) { s.Limits.NanoCPUs = 5e8 }, port.ErrUnsupported},
		"host workspace":   {func(s *port.RunSpec) { s.WorkspaceDir = t.TempDir() }, port.ErrUnsupported},
		"no argv":          {func(s *port.RunSpec) { s.Argv = nil }, port.ErrInvalidSpec},
		"unknown socket":   {func(s *port.RunSpec) { s.LLM = &port.LLMSocket{Volume: "nomad-sidecar-x"}; s.OwnBridge = true }, port.ErrInvalidSpec},
		"root":             {func(s *port.RunSpec) { s.User = "0" }, port.ErrInvalidSpec},
	} {
		spec := base
		c.mut(&spec)
		res, err := r.RunOnce(context.Background(), spec)
		if !errors.Is(err, c.want) || res != nil {
			t.Errorf("%s: %v, %v; want %v and no result", name, err, res, c.want)
		}
	}
	for _, o := range []Option{WithAddress(""), WithOwner("bad owner"), WithDatacenters(), WithProxyNetwork("none"), WithCPU(0), WithInit("relative")} {
		if _, err := NewRunner(o); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("a bad option gave %v", err)
		}
	}
	if _, err := r.Start(context.Background(), port.ProxySpec{RunID: "../x"}); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("a bad proxy spec gave %v", err)
	}
}

// TestUnframe: the init's frames decode to their bytes, whatever they are; a line
// that is no frame passes as it is; an unfinished line is left for later; the bound
// on the frames' size holds for one-byte frames, the worst case.
func TestUnframe(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) + "\n" }
	in := enc("\xff\x00a") + "panic: not a frame\n" + enc("b\n") + "QUJD"
	dec, rest := unframe([]byte(in))
	if string(dec) != "\xff\x00apanic: not a frame\nb\n" || string(rest) != "QUJD" {
		t.Errorf("unframe = %q, rest %q", dec, rest)
	}
	var framed int
	for i := 0; i < 1000; i++ {
		framed += len(enc("x"))
	}
	if int64(framed) > framedSize(1000) {
		t.Errorf("1000 one-byte frames take %d bytes, beyond framedSize %d", framed, framedSize(1000))
	}
}
