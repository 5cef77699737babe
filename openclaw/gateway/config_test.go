package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
)

func provider(model string) map[string]any {
	return map[string]any{"baseUrl": "http://127.0.0.1:4100/v1", "models": []any{map[string]any{"id": model}}}
}

func TestConfigGetAndPatch(t *testing.T) {
	srv := newServer(t, gatewaytest.WithConfig(map[string]any{
		"models": map[string]any{"providers": map[string]any{"a": provider("m-a")}},
	}))
	c := dial(t, srv)
	ctx := testCtx(t)

	snap, err := c.ConfigGet(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, snap.Hash)
	assert.True(t, snap.Valid)
	assert.JSONEq(t, `{"models":{"providers":{"a":{"baseUrl":"http://127.0.0.1:4100/v1","models":[{"id":"m-a"}]}}}}`, string(snap.Config))
	assert.Contains(t, string(snap.Raw), `"hash"`)

	res, err := c.ConfigPatch(ctx, gateway.ConfigPatch{
		Patch:    map[string]any{"models": map[string]any{"providers": map[string]any{"b": provider("m-b")}}},
		BaseHash: snap.Hash, Note: "add b",
	})
	require.NoError(t, err)
	assert.NotEqual(t, snap.Hash, res.Hash)
	assert.Equal(t, []string{"models.providers.b.baseUrl", "models.providers.b.models"}, res.ChangedPaths)
	assert.False(t, res.Noop)
	got, _ := json.Marshal(srv.Config())
	assert.JSONEq(t, `{"models":{"providers":{"a":{"baseUrl":"http://127.0.0.1:4100/v1","models":[{"id":"m-a"}]},
		"b":{"baseUrl":"http://127.0.0.1:4100/v1","models":[{"id":"m-b"}]}}}}`, string(got))

	// A patch based on the first read is refused: someone (we) wrote since.
	_, err = c.ConfigPatch(ctx, gateway.ConfigPatch{Patch: map[string]any{"x": 1}, BaseHash: snap.Hash})
	assert.ErrorIs(t, err, gateway.ErrConfigChanged)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, "config.patch", ge.Method)
	assert.Equal(t, gateway.CodeInvalidRequest, ge.Code)

	// Deleting a provider drops its models array: allowed only when named.
	snap, err = c.ConfigGet(ctx)
	require.NoError(t, err)
	drop := map[string]any{"models": map[string]any{"providers": map[string]any{"a": nil}}}
	_, err = c.ConfigPatch(ctx, gateway.ConfigPatch{Patch: drop, BaseHash: snap.Hash})
	require.ErrorAs(t, err, &ge)
	assert.Contains(t, ge.Message, "models.providers.a.models")
	assert.NotErrorIs(t, err, gateway.ErrConfigChanged, "a fresh read does not cure this refusal")
	_, err = c.ConfigPatch(ctx, gateway.ConfigPatch{Patch: drop, BaseHash: snap.Hash, ReplacePaths: []string{"models.providers.a.models"}})
	require.NoError(t, err)
	got, _ = json.Marshal(srv.Config())
	assert.JSONEq(t, `{"models":{"providers":{"b":{"baseUrl":"http://127.0.0.1:4100/v1","models":[{"id":"m-b"}]}}}}`, string(got))
	assert.Equal(t, 2, srv.ConfigWrites())

	for name, p := range map[string]gateway.ConfigPatch{
		"no patch":  {BaseHash: "h"},
		"no hash":   {Patch: map[string]any{"x": 1}},
		"no encode": {Patch: map[string]any{"x": make(chan int)}, BaseHash: "h"},
	} {
		_, err := c.ConfigPatch(ctx, p)
		assert.ErrorIs(t, err, errdefs.ErrInvalidSpec, name)
	}
	assert.Equal(t, 2, srv.ConfigWrites())
}

func TestErrConfigChangedMatchesOnlyConfigWrites(t *testing.T) {
	stale := &gateway.Error{Method: "config.patch", Code: gateway.CodeInvalidRequest, Message: "config changed since last load; re-run config.get and retry"}
	assert.ErrorIs(t, stale, gateway.ErrConfigChanged)
	other := *stale
	other.Method = "sessions.patch"
	assert.NotErrorIs(t, &other, gateway.ErrConfigChanged)
	invalid := &gateway.Error{Method: "config.patch", Code: gateway.CodeInvalidRequest, Message: "invalid config: models.providers.x.api"}
	assert.NotErrorIs(t, invalid, gateway.ErrConfigChanged)
}

func TestSessionsPatchOutboundHeaders(t *testing.T) {
	c := dial(t, newServer(t))
	ctx := testCtx(t)
	// The double refuses the field as upstream OpenClaw does.
	_, err := c.SessionsPatch(ctx, "s1", gateway.SessionPatch{OutboundHeaders: map[string]string{}})
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, gateway.CodeInvalidRequest, ge.Code)
	assert.Contains(t, ge.Message, "unexpected property 'outboundHeaders'")
}
