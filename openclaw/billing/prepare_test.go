package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
	"github.com/agentsandbox/sandbox/port"
)

const prepRouterURL = "http://127.0.0.1:4100"

var prepModel = openclaw.Model{ID: "gpt-4o-mini", ContextWindow: 32000, MaxTokens: 1024}

// prepFixture is a gateway double whose config has the default provider, a client
// to it, a router (never served: Prepare only needs its tokens) and a Preparer.
type prepFixture struct {
	srv  *gatewaytest.Server
	c    *gateway.Client
	r    *billing.Router
	prep *billing.Preparer
}

func newPrepFixture(t *testing.T, opts ...gatewaytest.Option) *prepFixture {
	t.Helper()
	def, err := openclaw.ProviderEntry(prepRouterURL+"/v1", prepModel)
	require.NoError(t, err)
	srv := gatewaytest.NewServer(append([]gatewaytest.Option{gatewaytest.WithConfig(map[string]any{
		"models": map[string]any{"providers": map[string]any{"unattributed": def}},
	})}, opts...)...)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c, err := gateway.Dial(ctx, srv.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	r, err := billing.NewRouter("http://127.0.0.1:4000", "sk-test")
	require.NoError(t, err)
	prep, err := billing.NewPreparer(c, prepRouterURL, []openclaw.Model{prepModel})
	require.NoError(t, err)
	return &prepFixture{srv: srv, c: c, r: r, prep: prep}
}

func (f *prepFixture) register(t *testing.T, runID string) *billing.Registration {
	t.Helper()
	reg, err := f.r.Register(billing.Run{RunID: runID, Attribution: port.Attribution{BillingAccountID: "acct-" + runID}})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = reg.Stop(context.Background()) })
	return reg
}

func (f *prepFixture) providers() map[string]any {
	m, _ := f.srv.Config()["models"].(map[string]any)
	p, _ := m["providers"].(map[string]any)
	return p
}

func prepCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPrepareAndRelease: the provider the gateway gets is exactly openclaw's
// builder output for the run's path, the session points at it, and Release
// takes both back.
func TestPrepareAndRelease(t *testing.T) {
	f := newPrepFixture(t)
	ctx := prepCtx(t)
	reg := f.register(t, "run-1")

	sess, err := f.prep.Prepare(ctx, reg, "Billing-1", prepModel.ID)
	require.NoError(t, err)
	name := f.prep.ProviderName(reg)
	assert.True(t, strings.HasPrefix(name, billing.DefaultProviderPrefix))
	assert.NotContains(t, name, reg.Token())
	assert.Equal(t, "agent:main:billing-1", sess.Key)
	assert.Equal(t, name+"/"+prepModel.ID, sess.ModelRef)
	assert.Equal(t, "run-1", sess.RunID)

	want, err := openclaw.ProviderEntry(reg.BaseURL(prepRouterURL), prepModel)
	require.NoError(t, err)
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(f.providers()[name])
	assert.JSONEq(t, string(wantJSON), string(gotJSON))
	assert.Contains(t, string(gotJSON), `"apiKey":"`+openclaw.PlaceholderAPIKey+`"`)
	assert.Contains(t, string(gotJSON), "/r/"+reg.Token()+"/v1", "the provider's baseUrl is the run's path")
	assert.Contains(t, f.providers(), "unattributed", "the patch merges; other providers stay")

	require.NoError(t, f.prep.Release(ctx, sess))
	assert.NotContains(t, f.providers(), name)
	assert.Contains(t, f.providers(), "unattributed")
	assert.Empty(t, f.prep.Pending())
	assert.Equal(t, 2, f.srv.ConfigWrites(), "one write to add, one to remove")
}

// TestPrepareRetriesAfterAConcurrentWrite: another writer changes the config
// between the Preparer's config.get and its config.patch; the Preparer reads
// again and its provider lands next to the other writer's change.
func TestPrepareRetriesAfterAConcurrentWrite(t *testing.T) {
	var srv *gatewaytest.Server
	interfered := false
	f := newPrepFixture(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		for {
			req, err := c.Next(context.Background())
			if err != nil {
				return
			}
			if req.Method == "config.patch" && !interfered {
				interfered = true
				srv.PatchConfig(map[string]any{"ui": map[string]any{"seamColor": "#000000"}})
			}
			c.Serve(req)
		}
	}))
	srv = f.srv
	ctx := prepCtx(t)
	reg := f.register(t, "run-2")
	sess, err := f.prep.Prepare(ctx, reg, "s2", prepModel.ID)
	require.NoError(t, err)
	assert.True(t, interfered)
	assert.Contains(t, f.providers(), sess.Provider)
	assert.Contains(t, f.srv.Config(), "ui", "the other writer's change survives")
	assert.Equal(t, 1, f.srv.ConfigWrites())
}

func TestPrepareRejectsUnknownModelWithoutWriting(t *testing.T) {
	f := newPrepFixture(t)
	reg := f.register(t, "run-3")
	_, err := f.prep.Prepare(prepCtx(t), reg, "s3", "not-offered")
	assert.ErrorIs(t, err, port.ErrInvalidSpec)
	assert.Zero(t, f.srv.ConfigWrites())
}

// TestOutboundHeadersOnUpstream: the double refuses outboundHeaders as upstream
// OpenClaw does, so the probe says no and PrepareHeaders is unsupported.
func TestOutboundHeadersOnUpstream(t *testing.T) {
	f := newPrepFixture(t)
	ctx := prepCtx(t)
	ok, err := billing.ProbeOutboundHeaders(ctx, f.c, "probe")
	require.NoError(t, err)
	assert.False(t, ok)
	reg := f.register(t, "run-4")
	_, err = f.prep.PrepareHeaders(ctx, reg, "s4", "unattributed/"+prepModel.ID)
	assert.ErrorIs(t, err, port.ErrUnsupported)
}

// scripted is a gateway double that offers each request to script first and serves
// the ones it did not take (true: taken, answered or left unanswered) as the double
// does.
func scripted(script func(*gatewaytest.Conn, gatewaytest.Request) bool) gatewaytest.Option {
	return gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		for {
			req, err := c.Next(context.Background())
			if err != nil {
				return
			}
			if !script(c, req) {
				c.Serve(req)
			}
		}
	})
}

// unansweredPatches is a gateway double that leaves the first n config.patch
// requests unanswered, making the write first when made is set (OpenClaw 2026.9.6
// can leave a write unanswered when the hot reload it waits for is superseded). It
// returns the fixture, a Preparer that waits 200 ms for an answer, and the count of
// config.patch requests seen.
func unansweredPatches(t *testing.T, n int, made bool) (*prepFixture, *billing.Preparer, *atomic.Int32) {
	t.Helper()
	var srv *gatewaytest.Server
	var seen atomic.Int32
	f := newPrepFixture(t, scripted(func(_ *gatewaytest.Conn, req gatewaytest.Request) bool {
		if req.Method != "config.patch" || int(seen.Add(1)) > n {
			return false
		}
		if made {
			var p struct {
				Raw string `json:"raw"`
			}
			var patch map[string]any
			if req.Decode(&p) != nil || json.Unmarshal([]byte(p.Raw), &patch) != nil {
				t.Errorf("config.patch params do not decode")
			}
			srv.PatchConfig(patch)
		}
		return true
	}))
	srv = f.srv
	prep, err := billing.NewPreparer(f.c, prepRouterURL, []openclaw.Model{prepModel}, billing.WithConfigWriteWait(200*time.Millisecond))
	require.NoError(t, err)
	return f, prep, &seen
}

// TestPrepareGoesOnWhenAWriteIsMadeButNotAnswered: the gateway makes the write
// but never answers; the Preparer reads the config, finds its provider and goes on
// without writing again.
func TestPrepareGoesOnWhenAWriteIsMadeButNotAnswered(t *testing.T) {
	f, prep, seen := unansweredPatches(t, 1, true)
	reg := f.register(t, "run-unanswered")
	sess, err := prep.Prepare(prepCtx(t), reg, "s-unanswered", prepModel.ID)
	require.NoError(t, err)
	assert.Contains(t, f.providers(), sess.Provider)
	assert.Equal(t, int32(1), seen.Load(), "the write that landed is not made again")
	assert.Equal(t, 0, f.srv.ConfigWrites(), "no answered write")
}

// TestPrepareWritesAgainWhenAnUnansweredWriteDidNotLand: the first write is lost
// without an answer; the Preparer finds its provider missing and writes again.
func TestPrepareWritesAgainWhenAnUnansweredWriteDidNotLand(t *testing.T) {
	f, prep, seen := unansweredPatches(t, 1, false)
	reg := f.register(t, "run-lost")
	sess, err := prep.Prepare(prepCtx(t), reg, "s-lost", prepModel.ID)
	require.NoError(t, err)
	assert.Contains(t, f.providers(), sess.Provider)
	assert.Equal(t, int32(2), seen.Load())
	assert.Equal(t, 1, f.srv.ConfigWrites())
}

// TestPrepareGivesUpOnAGatewayThatNeverAnswers: writes that neither answer nor
// land end Prepare with a deadline error after three tries, and nothing is left
// pointed at the run.
func TestPrepareGivesUpOnAGatewayThatNeverAnswers(t *testing.T) {
	f, prep, seen := unansweredPatches(t, 100, false)
	reg := f.register(t, "run-silent")
	_, err := prep.Prepare(prepCtx(t), reg, "s-silent", prepModel.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "config.patch")
	assert.Equal(t, int32(3), seen.Load())
	assert.NotContains(t, f.providers(), prep.ProviderName(reg))
}

// TestConfigWriteWaitRefusesNonPositive: the option validates its argument.
func TestConfigWriteWaitRefusesNonPositive(t *testing.T) {
	f := newPrepFixture(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := billing.NewPreparer(f.c, prepRouterURL, []openclaw.Model{prepModel}, billing.WithConfigWriteWait(d))
		require.ErrorIs(t, err, port.ErrInvalidSpec, "wait %v", d)
	}
}

// refusedPatches is a gateway double that refuses the first n sessions.patch
// requests with refusal(provider) (OpenClaw refuses a provider its config reload has
// not loaded yet with `Unknown provider "<name>"`), and counts them all.
func refusedPatches(t *testing.T, n int, refusal func(provider string) string, opts ...billing.PreparerOption) (*prepFixture, *billing.Preparer, *atomic.Int32) {
	t.Helper()
	var seen atomic.Int32
	f := newPrepFixture(t, scripted(func(c *gatewaytest.Conn, req gatewaytest.Request) bool {
		if req.Method != "sessions.patch" || int(seen.Add(1)) > n {
			return false
		}
		var p struct {
			Model string `json:"model"`
		}
		_ = req.Decode(&p)
		provider, _, _ := strings.Cut(p.Model, "/")
		_ = c.ReplyError(req.ID, gatewaytest.Error{Code: "INVALID_REQUEST", Message: refusal(provider)}, nil)
		return true
	}))
	prep, err := billing.NewPreparer(f.c, prepRouterURL, []openclaw.Model{prepModel}, opts...)
	require.NoError(t, err)
	return f, prep, &seen
}

func unknownProvider(provider string) string {
	return fmt.Sprintf("Unknown provider %q. Use /models to list providers.", provider)
}

// TestPrepareWaitsForTheReload: while the gateway has not loaded the run's provider
// (a loaded machine took over 10 s, the old fixed bound), Prepare keeps pointing the
// session at it within the reload wait, and gives up after it with an error that
// says so.
func TestPrepareWaitsForTheReload(t *testing.T) {
	f, prep, seen := refusedPatches(t, 6, unknownProvider, billing.WithReloadWait(10*time.Second))
	reg := f.register(t, "run-reload")
	sess, err := prep.Prepare(prepCtx(t), reg, "s-reload", prepModel.ID)
	require.NoError(t, err)
	assert.Equal(t, prep.ProviderName(reg), sess.Provider)
	assert.Equal(t, int32(7), seen.Load(), "six refusals, then the patch that lands")

	f, prep, seen = refusedPatches(t, 1000, unknownProvider, billing.WithReloadWait(time.Second))
	reg = f.register(t, "run-never")
	start := time.Now()
	_, err = prep.Prepare(prepCtx(t), reg, "s-never", prepModel.ID)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not load the run's provider within 1s")
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.GreaterOrEqual(t, seen.Load(), int32(3))
}

// TestPrepareDoesNotRetryOtherRefusals: a refusal that does not name the run's
// provider is no reload in flight: Prepare returns it at once.
func TestPrepareDoesNotRetryOtherRefusals(t *testing.T) {
	f, prep, seen := refusedPatches(t, 1000, func(string) string { return "invalid sessions.patch params" })
	reg := f.register(t, "run-refused")
	_, err := prep.Prepare(prepCtx(t), reg, "s-refused", prepModel.ID)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, gateway.CodeInvalidRequest, ge.Code)
	assert.Equal(t, int32(1), seen.Load())
}

// TestReloadWaitRefusesNonPositive: the option validates its argument.
func TestReloadWaitRefusesNonPositive(t *testing.T) {
	f := newPrepFixture(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := billing.NewPreparer(f.c, prepRouterURL, []openclaw.Model{prepModel}, billing.WithReloadWait(d))
		require.ErrorIs(t, err, port.ErrInvalidSpec, "wait %v", d)
	}
}
