package proxydapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

var update = flag.Bool("update", false, "rewrite testdata/wire.golden.json from the values in TestWireGolden")

// wireSamples are one fully filled value of every body of the admin API.
func wireSamples() map[string]any {
	now := time.UnixMilli(1_700_000_000_000).UTC()
	uid := 1001
	rec := AuditRecord{Time: now, RunID: "run-1", Attempt: 2, Method: "POST", Path: "/v1/chat/completions", Status: 200,
		ReqBytes: 100, RespBytes: 2000, Model: "gpt-x", Streamed: true, CallID: "call-1", RequestID: "chatcmpl-1",
		ResponseCost: "0.0012", Latency: 1500 * time.Millisecond, TTFB: 300 * time.Millisecond, Blocked: "budget", Error: "cut"}
	egr := EgressRecord{Time: now, RunID: "run-1", Provider: "github", Mode: "mitm", Method: "GET", Scheme: "https",
		Host: "api.github.com", Path: "/repos/x", Status: 200, ReqBytes: 10, RespBytes: 20, Latency: time.Second,
		Guard: "allowlist", Truncated: true, Reflected: 1, Error: "e", Credentials: []string{"token"}}
	pol := EgressPolicy{
		Providers: []EgressProvider{{ID: "github", URIs: []string{"https://api.github.com/repos/"}, Credentials: []string{"token"},
			Placements: map[string]CredentialPlacement{"token": {Headers: []string{"Authorization"}, Path: true, Query: true, Body: true}},
			TunnelOnly: true}},
		MaxRequestBytes: 1 << 20, MaxRunBytes: 1 << 30, ResponseLimit: 50 << 10, ResponseCeiling: 8 << 20, UpstreamProxy: "http://127.0.0.1:3128",
	}
	att := json.RawMessage(`{"time":"2023-11-14T22:13:20Z","uid":1001,"interfaces":["lo"]}`)
	status, apiErr := ToAPIError(fmt.Errorf("run %q: %w", "r1", errdefs.ErrNotFound))
	return map[string]any{
		"paths": []string{PathHealth, PathRuns, HeaderSandboxID},
		"register_request": RegisterRequest{RunID: "run-1", Attempt: 2, Upstream: "http://127.0.0.1:4000", APIKey: "sk-x",
			Attribution: Attribution{BillingAccountID: "acct", UserID: "u", GraphID: "g", ExistingTraceID: "t", SessionID: "s", TraceUserID: "tu"},
			Budget:      Budget{MaxCalls: 3, MaxTokens: 1000}, RequireAttestation: true, Labels: map[string]string{"team": "a"},
			SandboxUID: &uid, Rate: &RateLimit{RPS: 2.5, Burst: 5, Streams: 2},
			Network: &NetworkIdentity{IP: netip.MustParseAddr("10.1.2.3").String(), Name: "n", StartTime: now, SessionToken: "tok"},
			Egress:  &EgressRegistration{Policy: pol, Credentials: []EgressCredential{{Provider: "github", Name: "token", Value: "v"}}}},
		"registered": Registered{ID: "id-1", RunID: "run-1", Attempt: 2, SocketDir: "/run/proxyd/r1", SocketPath: "/run/proxyd/r1/llm.sock",
			Token: "tok", TokenExpiry: now, Restarted: "id-0", Egress: true},
		"run_info": RunInfo{ID: "id-1", RunID: "run-1", Attempt: 2, SocketDir: "/run/proxyd/r1", IP: "10.1.2.3",
			RegisteredAt: now, LastSeen: now, Calls: 4, Tokens: 500},
		"deregister_response": DeregisterResponse{Audit: []AuditRecord{rec}, Attestation: att, Error: "grace ran out",
			Egress: []EgressRecord{egr}, EgressSummary: &EgressSummary{Records: 3, Kept: 1, Summarised: map[string]int{"allowlist": 2}}},
		"egress_audit":       EgressAudit{Records: []EgressRecord{egr}},
		"audit_page":         AuditPage{Records: []AuditRecord{rec}, Next: 7},
		"audit_entry":        AuditEntry{Seq: 7, Record: rec},
		"attestation_answer": AttestationAnswer{Attestation: att},
		"health":             Health{Status: "ok", Runs: 3},
		"api_error":          map[string]any{"status": status, "body": apiErr},
	}
}

// TestWireGolden pins the admin API's bodies: every one encodes to the bytes in
// testdata/wire.golden.json, and those bytes decode back to the same value. The
// daemon also keeps RegisterRequest in its registry file, so a change here is a
// change of what a restarted daemon reads back: make it on purpose, then run the
// test with -update.
func TestWireGolden(t *testing.T) {
	samples := wireSamples()
	got, err := json.MarshalIndent(samples, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "wire.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the wire changed:\n got %s\nwant %s", got, want)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(want, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(samples) {
		t.Errorf("golden has %d bodies, the test %d", len(raw), len(samples))
	}
	for name, v := range samples {
		if name == "api_error" {
			continue // a map of interfaces: compared as bytes above
		}
		back := reflect.New(reflect.TypeOf(v))
		if err := json.Unmarshal(raw[name], back.Interface()); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// Raw attestations come back with the golden file's indentation.
		if !reflect.DeepEqual(normal(t, back.Elem().Interface()), normal(t, v)) {
			t.Errorf("%s decodes to %+v, want %+v", name, back.Elem().Interface(), v)
		}
	}
}

// normal is v as compact JSON, for comparing values that hold raw JSON.
func normal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		t.Fatal(err)
	}
	return c.String()
}
