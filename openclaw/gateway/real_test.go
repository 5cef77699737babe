package gateway_test

// Tests against the real `openclaw gateway` process. They need OPENCLAW_BIN (a
// runnable openclaw launcher) and, when `node` on PATH is older than 24,
// NODE24_BIN; scripts/install-openclaw.sh provides both. The gateway gets its own
// config (the project's builder), state and home directories and talks only to
// loopback: its LLM provider is the fake LiteLLM started by the test.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/testsupport/openclawtest"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
)

// The models the gateway's config lists, both served by litellmtest's defaults.
const (
	defaultModel  = "gpt-4o-mini"
	overrideModel = "claude-haiku"
)

// startRealGateway starts the real gateway with a generated config whose provider
// is the fake LiteLLM. The fake accepts the config's placeholder key: the gateway
// client, not key injection, is under test here (openclaw/billing puts its router
// between them).
func startRealGateway(t testing.TB) (*openclawtest.Gateway, *litellmtest.Server) {
	llm := litellmtest.NewServer(litellmtest.WithReply(openclawtest.MarkerReply), litellmtest.WithMasterKey(openclaw.PlaceholderAPIKey))
	t.Cleanup(llm.Close)
	gw := openclawtest.StartGateway(t,
		openclaw.WithBaseURL(llm.URL+"/v1"),
		openclaw.WithModels(
			openclaw.Model{ID: defaultModel, ContextWindow: 128000, MaxTokens: 16384},
			openclaw.Model{ID: overrideModel, ContextWindow: 200000, MaxTokens: 8192},
		),
		openclaw.WithDefaultModel(defaultModel),
	)
	return gw, llm
}

// modelsByMarker maps each marker that reached the fake LiteLLM to the models its
// chat completions asked for.
func modelsByMarker(t testing.TB, llm *litellmtest.Server) map[string][]string {
	out := map[string][]string{}
	for _, r := range llm.Requests() {
		if !strings.HasSuffix(r.Path, "/chat/completions") {
			continue
		}
		var body struct {
			Model string `json:"model"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		for _, m := range openclawtest.MarkerRE.FindAllSubmatch(r.Body, -1) {
			out[string(m[1])] = append(out[string(m[1])], body.Model)
		}
	}
	return out
}

func TestRealGateway(t *testing.T) {
	gw, llm := startRealGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()

	t.Run("handshake", func(t *testing.T) {
		c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer c.Close()
		h := c.Hello()
		assert.Equal(t, 4, h.Protocol)
		assert.NotEmpty(t, h.Server.ConnID)
		assert.Positive(t, h.Policy.TickIntervalMs)
		assert.Positive(t, h.Policy.MaxPayload)
		for _, m := range []string{"agent", "agent.wait", "chat.abort", "sessions.patch"} {
			assert.True(t, h.HasMethod(m), "gateway offers %s", m)
		}
		assert.Equal(t, "operator", h.Auth.Role)
	})

	t.Run("wrong token", func(t *testing.T) {
		_, err := gateway.Dial(ctx, gw.URL, gateway.WithToken("not-the-token"))
		require.ErrorIs(t, err, gateway.ErrAuth)
		var ge *gateway.Error
		require.ErrorAs(t, err, &ge)
		assert.Equal(t, gateway.DetailAuthTokenMismatch, ge.DetailCode)
	})

	t.Run("sessions.patch model reaches the upstream", func(t *testing.T) {
		c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer c.Close()
		res, err := c.SessionsPatch(ctx, "patch-test", gateway.SessionPatch{Model: openclaw.DefaultProvider + "/" + overrideModel})
		require.NoError(t, err)
		assert.Equal(t, "agent:main:patch-test", res.Key)
		assert.Equal(t, overrideModel, res.Model)

		r, err := c.Agent(ctx, gateway.AgentRequest{Message: "Reply with the code word only. MARKER=PATCHED", SessionKey: "patch-test", Timeout: 90 * time.Second})
		require.NoError(t, err)
		out, err := r.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, "ok", out.Status)
		assert.Equal(t, "ANSWER-PATCHED", out.Text)
		models := modelsByMarker(t, llm)["PATCHED"]
		require.NotEmpty(t, models, "the patched session's call reached the fake LiteLLM")
		for _, m := range models {
			assert.Equal(t, overrideModel, m, "the session's model override is what the upstream was asked for")
		}
	})

	t.Run("two sessions isolated", func(t *testing.T) {
		type outcome struct {
			res  *gateway.AgentResult
			seen []string
			err  error
		}
		run := func(marker string) outcome {
			c, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
			if err != nil {
				return outcome{err: err}
			}
			defer c.Close()
			r, err := c.Agent(ctx, gateway.AgentRequest{
				Message:    "Reply with the code word only. MARKER=" + marker,
				SessionKey: "isolation-" + strings.ToLower(marker),
				Timeout:    90 * time.Second,
			})
			if err != nil {
				return outcome{err: err}
			}
			var seen []string
			for u := range r.Updates(ctx) {
				seen = append(seen, u.Text, u.ErrorMessage, string(u.Data))
			}
			res, err := r.Wait(ctx)
			return outcome{res: res, seen: seen, err: err}
		}
		// An observer that starts no run: every event it gets is someone else's,
		// which proves the gateway broadcasts and the filter is what isolates.
		observer, err := gateway.Dial(ctx, gw.URL, gateway.WithToken(gw.Token))
		require.NoError(t, err)
		defer observer.Close()

		var wg sync.WaitGroup
		out := map[string]outcome{}
		var mu sync.Mutex
		for _, m := range []string{"ALPHA", "BRAVO"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := run(m)
				mu.Lock()
				out[m] = o
				mu.Unlock()
			}()
		}
		wg.Wait()
		assert.Positive(t, observer.ForeignEvents(), "the gateway broadcast the runs' events to a bystander")
		for mine, theirs := range map[string]string{"ALPHA": "BRAVO", "BRAVO": "ALPHA"} {
			o := out[mine]
			require.NoError(t, o.err, mine)
			assert.Equal(t, "ok", o.res.Status, mine)
			assert.Contains(t, o.res.Text, "ANSWER-"+mine)
			assert.NotContains(t, o.res.Text, theirs)
			assert.NotContains(t, o.res.Text, gateway.HeartbeatToken)
			assert.Equal(t, "ANSWER-"+mine, o.res.StreamedText, "chat deltas of the run are delivered")
			for _, s := range o.seen {
				assert.NotContains(t, s, "ANSWER-"+theirs, mine)
				assert.NotContains(t, s, gateway.HeartbeatToken, mine)
			}
			models := modelsByMarker(t, llm)[mine]
			require.NotEmpty(t, models, mine)
			for _, m := range models {
				assert.Equal(t, defaultModel, m, "an unpatched session uses the config's default model")
			}
		}
	})
}
