package billing_test

// Tests against the real `openclaw gateway` process (OPENCLAW_BIN and, when node on
// PATH is older than 24, NODE24_BIN; scripts/install-openclaw.sh provides both).
// The gateway's only provider is the billing Router, whose upstream is the fake
// LiteLLM; everything listens on loopback.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/openclawtest"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/port"
)

const realModel = "gpt-4o-mini" // served by litellmtest's default models

// startGateway starts `openclaw gateway` whose only provider, and so the default
// model, is the router's plain /v1: without a run token every call is refused.
func startGateway(t *testing.T, routerURL string) (wsURL, token string) {
	t.Helper()
	gw := openclawtest.StartGateway(t,
		openclaw.WithProviderName("unattributed"),
		openclaw.WithBaseURL(routerURL+"/v1"),
		openclaw.WithModels(openclaw.Model{ID: realModel, ContextWindow: 32000, MaxTokens: 1024}),
	)
	return gw.URL, gw.Token
}

type runOutcome struct {
	res *gateway.AgentResult
	err error
}

func runAgent(ctx context.Context, c *gateway.Client, sessionKey, marker string) runOutcome {
	r, err := c.Agent(ctx, gateway.AgentRequest{
		Message:    "Reply with the code word only. MARKER=" + marker,
		SessionKey: sessionKey,
		Timeout:    90 * time.Second,
	})
	if err != nil {
		return runOutcome{err: err}
	}
	res, err := r.Wait(ctx)
	return runOutcome{res: res, err: err}
}

func TestRealGatewayPerRunAttribution(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real openclaw gateway")
	}
	llm := litellmtest.NewServer(litellmtest.WithReply(openclawtest.MarkerReply))
	t.Cleanup(llm.Close)

	router, err := billing.NewRouter(llm.URL, llm.MasterKey())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = router.Serve(ln) }()
	t.Cleanup(func() { _ = router.Shutdown(context.Background()) })
	routerURL := "http://" + ln.Addr().String()

	wsURL, gwToken := startGateway(t, routerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	c, err := gateway.Dial(ctx, wsURL, gateway.WithToken(gwToken))
	require.NoError(t, err)
	defer c.Close()

	upstream, err := billing.ProbeOutboundHeaders(ctx, c, "billing-probe")
	require.NoError(t, err)
	assert.False(t, upstream, "upstream OpenClaw has no per-session outboundHeaders")

	prep, err := billing.NewPreparer(c, routerURL, []openclaw.Model{{ID: realModel, ContextWindow: 32000, MaxTokens: 1024}})
	require.NoError(t, err)

	type side struct {
		marker, account, session string
		reg                      *billing.Registration
		sess                     *billing.Session
	}
	sides := []*side{
		{marker: "ALPHA", account: "acct-alpha", session: "billing-alpha"},
		{marker: "BRAVO", account: "acct-bravo", session: "billing-bravo"},
	}
	for _, s := range sides {
		s.reg, err = router.Register(billing.Run{
			RunID: "run-" + strings.ToLower(s.marker), Attempt: 1,
			Attribution: port.Attribution{BillingAccountID: s.account, UserID: "user-" + s.marker, GraphID: "g"},
		})
		require.NoError(t, err)
	}
	// Prepare both concurrently: config writes must serialise on the base hash.
	var wg sync.WaitGroup
	prepErr := make([]error, len(sides))
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.sess, prepErr[i] = prep.Prepare(ctx, s.reg, s.session, realModel)
		}()
	}
	wg.Wait()
	for i, s := range sides {
		require.NoError(t, prepErr[i], s.marker)
		assert.Equal(t, "agent:main:"+s.session, s.sess.Key)
		assert.Equal(t, prep.ProviderName(s.reg)+"/"+realModel, s.sess.ModelRef)
	}

	out := make([]runOutcome, len(sides))
	for i, s := range sides {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = runAgent(ctx, c, s.sess.Key, s.marker) }()
	}
	wg.Wait()
	for i, s := range sides {
		require.NoError(t, out[i].err, s.marker)
		assert.Equal(t, "ok", out[i].res.Status, s.marker)
		assert.Equal(t, "ANSWER-"+s.marker, strings.TrimSpace(out[i].res.Text), s.marker)
	}

	// A session nobody prepared uses the default provider: the router's plain /v1.
	stray := runAgent(ctx, c, "billing-stray", "STRAY")
	if stray.err == nil {
		assert.NotContains(t, stray.res.Text, "ANSWER-STRAY", "an unattributed call must never reach LiteLLM")
	}
	assert.Positive(t, router.Stats().Unattributed, "the stray session's call was refused")
	for _, rec := range router.Unattributed() {
		assert.Equal(t, "unattributed", rec.Blocked)
		assert.Equal(t, http.StatusForbidden, rec.Status)
		assert.Equal(t, "/v1/chat/completions", rec.Path)
		assert.Empty(t, rec.RunID)
	}

	// Every call LiteLLM saw carries the attribution of the run whose marker it holds.
	perAccount := map[string]int{}
	for _, rq := range llm.Requests() {
		if !strings.HasSuffix(rq.Path, "/chat/completions") {
			continue
		}
		m := openclawtest.MarkerRE.FindAllSubmatch(rq.Body, -1)
		require.NotEmpty(t, m, "request without a marker reached LiteLLM")
		var owner *side
		for _, s := range sides {
			if string(m[0][1]) == s.marker {
				owner = s
			}
		}
		require.NotNil(t, owner, "marker %s reached LiteLLM", m[0][1])
		for _, mm := range m {
			assert.Equal(t, owner.marker, string(mm[1]), "one call mixes two runs' conversations")
		}
		assert.Equal(t, owner.account, rq.Header.Get("X-Litellm-End-User-Id"))
		assert.Equal(t, "Bearer "+llm.MasterKey(), rq.Header.Get("Authorization"))
		var md map[string]any
		require.NoError(t, json.Unmarshal([]byte(rq.Header.Get("X-Litellm-Spend-Logs-Metadata")), &md))
		assert.Equal(t, owner.reg.RunID(), md["run_id"])
		assert.Equal(t, "user-"+owner.marker, md["user_id"])
		assert.Empty(t, rq.Header.Get(billing.TokenHeader))
		perAccount[owner.account]++
	}

	// Spend rows agree, and each run's audit names exactly its rows.
	rowsByCall := map[string]litellmtest.SpendRow{}
	for _, row := range llm.SpendRows() {
		rowsByCall[row.LitellmCallID] = row
	}
	for _, s := range sides {
		recs, err := s.reg.Stop(ctx)
		require.NoError(t, err)
		require.Len(t, recs, perAccount[s.account], s.marker)
		require.NotEmpty(t, recs, s.marker)
		for _, rec := range recs {
			assert.Equal(t, s.reg.RunID(), rec.RunID)
			assert.Equal(t, 1, rec.Attempt)
			assert.Equal(t, http.StatusOK, rec.Status)
			assert.Equal(t, realModel, rec.Model)
			assert.True(t, rec.Streamed)
			row, ok := rowsByCall[rec.CallID]
			require.True(t, ok, "audit call id %q has a spend row", rec.CallID)
			assert.Equal(t, s.account, row.EndUser)
			assert.Equal(t, rec.RequestID, row.RequestID)
			slm, _ := row.Metadata["spend_logs_metadata"].(map[string]any)
			assert.Equal(t, s.reg.RunID(), slm["run_id"])
		}
	}

	// Release removes the per-run providers from the gateway's config.
	for _, s := range sides {
		require.NoError(t, prep.Release(ctx, s.sess))
	}
	assert.Empty(t, prep.Pending())
	snap, err := c.ConfigGet(ctx)
	require.NoError(t, err)
	assert.NotContains(t, string(snap.Raw), billing.DefaultProviderPrefix)

	// A revoked token is refused at the router, whoever presents it.
	before := router.Stats().Unattributed
	resp, err := http.Post(sides[0].reg.BaseURL(routerURL)+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+realModel+`","messages":[{"role":"user","content":"MARKER=ALPHA"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, string(body))
	assert.Equal(t, before+1, router.Stats().Unattributed)
}
