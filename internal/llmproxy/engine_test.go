package llmproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

func chatRoute(t *testing.T) proxypolicy.Route {
	t.Helper()
	rt, _, ok, _ := proxypolicy.RouteFor("POST", "/v1/chat/completions")
	if !ok {
		t.Fatal("no chat route")
	}
	return rt
}

func TestBodyPolicy(t *testing.T) {
	rt := chatRoute(t)
	in := `{"model":"m","messages":[],"max_tokens":50,"max_completion_tokens":70,"user":"x","\u0075ser":"y",` +
		`"metadata":{"user_id":"v"},"API_BASE":"h","api_base":"h","stream":true,"stream_options":{"include_usage":false,"x":1}}`
	p, ref := applyBodyPolicy(rt, "application/json; charset=utf-8", []byte(in), "acct")
	if ref != nil {
		t.Fatal(ref)
	}
	var out map[string]any
	if err := json.Unmarshal(p.body, &out); err != nil {
		t.Fatal(err)
	}
	// The smallest cap named counts: which one the upstream reads is its choice.
	if out["user"] != "acct" || p.model != "m" || p.maxOut != 50 {
		t.Errorf("out %v model %q maxOut %d", out, p.model, p.maxOut)
	}
	if so := out["stream_options"].(map[string]any); len(so) != 1 || so["include_usage"] != true {
		t.Errorf("stream_options %v", so)
	}
	if want := []string{"API_BASE", "api_base", "metadata"}; !slices.Equal(p.dropped, want) {
		t.Errorf("dropped %v, want %v", p.dropped, want)
	}
	for _, bad := range []struct{ ct, body string }{
		{"text/plain", `{}`}, {"", `[]`}, {"", `{} {}`}, {"", ``}, {"", `{"a":`}, {"application/json;;", `{}`},
	} {
		if _, ref := applyBodyPolicy(rt, bad.ct, []byte(bad.body), "acct"); ref == nil || ref.Blocked != "body_not_json" || !strings.HasPrefix(ref.Message, "body_policy: ") {
			t.Errorf("%q %q: %+v", bad.ct, bad.body, ref)
		}
	}
}

func TestMeterReservations(t *testing.T) {
	m := NewMeter(MeterConfig{RunID: "r", Budget: port.Budget{MaxTokens: 100}})
	a, b, c := &Call{meter: m}, &Call{meter: m}, &Call{meter: m}
	text := func(prompt, choices int64) tokenNeed {
		return tokenNeed{prompt: prompt, choices: choices, output: true}
	}
	res, ref := m.reserve(true, text(10, 1), 50, 4096)
	if a.reserved = res.tokens; ref != nil || res.tokens != 60 || res.outCap != 50 {
		t.Fatalf("a: %+v %v", res, ref)
	}
	// b asks for 50 but 40 are left: its cap is lowered to fit.
	res, ref = m.reserve(true, text(10, 1), 50, 4096)
	if b.reserved = res.tokens; ref != nil || res.tokens != 40 || res.outCap != 30 {
		t.Fatalf("b gets what is left: %+v %v", res, ref)
	}
	if _, ref = m.reserve(true, text(1, 1), 1, 4096); ref == nil || !strings.Contains(ref.Message, "100 more reserved by calls in flight") {
		t.Fatalf("c must wait for the reservations: %+v", ref)
	}
	m.charge(a, 30) // a used less than it reserved
	m.settle(a, true)
	// c asks for two choices and names no cap: the default is lowered to
	// (30 left - 10 prompt) / 2.
	res, ref = m.reserve(true, text(10, 2), 0, 4096)
	if c.reserved = res.tokens; ref != nil || res.tokens != 30 || res.outCap != 10 {
		t.Fatalf("c after a settled: %+v %v", res, ref)
	}
	m.settle(b, true) // b reported no usage: charged its reservation
	m.settle(c, false)
	if st := m.Stats(); st.Tokens != 70 || m.reserved != 0 {
		t.Errorf("tokens %d reserved %d", st.Tokens, m.reserved)
	}
	// With 30 left, a prompt bound of 50 is still admitted, once, with a cap of
	// 1: the one call's excess is its prompt bound plus its choices minus what
	// was left.
	d := &Call{meter: m}
	res, ref = m.reserve(true, text(50, 3), 0, 4096)
	if d.reserved = res.tokens; ref != nil || res.outCap != 1 || res.tokens != 53 {
		t.Fatalf("d: %+v %v", res, ref)
	}
	if _, ref = m.reserve(true, text(1, 1), 1, 4096); ref == nil {
		t.Fatal("a call was admitted over a budget fully reserved")
	}
	m.settle(d, false)
	// Media the body's bytes do not bound: the call reserves all that is left.
	res, ref = m.reserve(true, tokenNeed{prompt: 5, choices: 1, output: true, media: true}, 3, 4096)
	if ref != nil || res.tokens != 30 || res.outCap != 3 {
		t.Fatalf("media: %+v %v", res, ref)
	}
}

func TestMeterStopWaitsForCalls(t *testing.T) {
	m := NewMeter(MeterConfig{RunID: "r"})
	if !m.Enter() {
		t.Fatal("Enter failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.Stop(ctx); err == nil {
		t.Fatal("Stop returned with a call in flight")
	}
	if m.Enter() {
		t.Fatal("Enter succeeded after Stop")
	}
	m.leave(port.AuditRecord{Path: "/v1/models"}, true, false, "")
	recs, err := m.Stop(context.Background())
	if err != nil || len(recs) != 1 {
		t.Fatalf("Stop: %v %v", recs, err)
	}
}

// TestBodiesInFlightAreCapped: a run cannot make the host hold more than
// MaxBodiesInFlight request bodies at once; a call waits for a slot, and a slot
// comes back once its body has been sent.
func TestBodiesInFlightAreCapped(t *testing.T) {
	var mu sync.Mutex
	seen := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","usage":{"total_tokens":1}}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	e, err := NewEngine(Config{Upstream: u, Transport: NewTransport(), MaxRequestBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := proxypolicy.NewPolicy(port.ProxySpec{RunID: "r", APIKey: "k", Attribution: port.Attribution{BillingAccountID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMeter(MeterConfig{RunID: "r", Policy: pol})
	call := func(ctx context.Context) int {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		w := httptest.NewRecorder()
		m.Enter()
		e.Forward(w, r, m, r.URL.Path)
		return w.Code
	}
	if code := call(context.Background()); code != 200 {
		t.Fatalf("first call: %d", code)
	}
	for range MaxBodiesInFlight { // other calls' bodies, not yet sent
		m.bodies <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if code := call(ctx); code != http.StatusServiceUnavailable {
		t.Errorf("a call past the cap got %d, want to wait (and give up with its client)", code)
	}
	<-m.bodies
	if code := call(context.Background()); code != 200 {
		t.Errorf("a call after a slot came back: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != 2 || len(m.bodies) != MaxBodiesInFlight-1 {
		t.Errorf("upstream saw %d calls, %d slots held; want 2 and %d", seen, len(m.bodies), MaxBodiesInFlight-1)
	}
}
