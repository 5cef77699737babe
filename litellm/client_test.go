package litellm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

func newFake(t *testing.T, opts ...litellmtest.Option) *litellmtest.Server {
	t.Helper()
	s := litellmtest.NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, s *litellmtest.Server, opts ...litellm.Option) *litellm.Client {
	t.Helper()
	c, err := litellm.New(append([]litellm.Option{
		litellm.WithBaseURL(s.URL), litellm.WithMasterKey(s.MasterKey()),
		litellm.WithRetry(3, time.Millisecond, 5*time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	return c
}

func TestNewValidates(t *testing.T) {
	cases := map[string][]litellm.Option{
		"no base url":       {litellm.WithMasterKey("k")},
		"no key":            {litellm.WithBaseURL("http://127.0.0.1:4000")},
		"relative url":      {litellm.WithBaseURL("127.0.0.1:4000"), litellm.WithMasterKey("k")},
		"ftp url":           {litellm.WithBaseURL("ftp://h"), litellm.WithMasterKey("k")},
		"key with newline":  {litellm.WithBaseURL("http://h"), litellm.WithMasterKey("k\r\nX: y")},
		"negative retries":  {litellm.WithBaseURL("http://h"), litellm.WithMasterKey("k"), litellm.WithRetry(-1, time.Second, time.Second)},
		"min wait over max": {litellm.WithBaseURL("http://h"), litellm.WithMasterKey("k"), litellm.WithRetry(1, time.Second, time.Millisecond)},
		"nil http client":   {litellm.WithBaseURL("http://h"), litellm.WithMasterKey("k"), litellm.WithHTTPClient(nil)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := litellm.New(opts...)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
		})
	}
	c, err := litellm.New(litellm.WithBaseURL("http://127.0.0.1:1/prefix/"), litellm.WithMasterKey("k"), litellm.WithLogger(nil))
	require.NoError(t, err, "New does no I/O, so an unreachable address is fine")
	assert.NotNil(t, c)
}

func TestAuthErrors(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	ctx := context.Background()

	t.Run("wrong key", func(t *testing.T) {
		bad, err := litellm.New(litellm.WithBaseURL(s.URL), litellm.WithMasterKey("sk-wrong"))
		require.NoError(t, err)
		_, err = bad.Models(ctx)
		require.ErrorIs(t, err, litellm.ErrUnauthorized)
		var apiErr *litellm.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
		assert.Equal(t, "auth_error", apiErr.Type)
		assert.Equal(t, "401", apiErr.Code)
		assert.Equal(t, "", apiErr.Param, `"None" is LiteLLM's null`)
		assert.Contains(t, apiErr.Message, "Invalid proxy server token passed")
		assert.Nil(t, apiErr.Detail)
		assert.NotErrorIs(t, err, errdefs.ErrUnavailable)
	})

	for _, tc := range []struct {
		name   string
		status int
		shape  litellmtest.ErrorShape
		code   string
	}{
		{"401 proxy shape", 401, litellmtest.ShapeProxy, "401"},
		{"401 numeric code", 401, litellmtest.ShapeNumericCode, "401"},
		{"403 detail object", 403, litellmtest.ShapeDetail, ""},
		{"403 detail string", 403, litellmtest.ShapeDetailString, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.FailNext("/health/readiness", 1, tc.status, tc.shape)
			s.ResetRequests()
			_, err := c.Readiness(ctx)
			require.ErrorIs(t, err, litellm.ErrUnauthorized)
			var apiErr *litellm.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.status, apiErr.StatusCode)
			assert.Equal(t, tc.code, apiErr.Code)
			assert.Contains(t, apiErr.Message, "Authentication Error")
			if tc.code == "" {
				assert.NotEmpty(t, apiErr.Detail, "the FastAPI detail is kept")
			}
			assert.Equal(t, 1, s.RequestCount("/health/readiness"), "4xx is not retried")
		})
	}
}

func TestRetries(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	ctx := context.Background()

	s.FailNext("/v1/models", 1, http.StatusBadGateway, litellmtest.ShapeDetailString)
	s.FailNext("/v1/models", 1, http.StatusServiceUnavailable, litellmtest.ShapeProxy)
	models, err := c.Models(ctx)
	require.NoError(t, err)
	assert.Len(t, models, 2)
	assert.Equal(t, 3, s.RequestCount("/v1/models"), "502, 503, then success")

	s.FailNext("/health/readiness", 10, http.StatusServiceUnavailable, litellmtest.ShapeProxy)
	_, err = c.Readiness(ctx)
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	var apiErr *litellm.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	assert.Equal(t, 4, s.RequestCount("/health/readiness"), "one try and three retries")

	s.ResetRequests()
	s.FailNextRetryAfter("/health/liveliness", 1, http.StatusTooManyRequests, time.Second)
	require.NoError(t, c.Liveliness(ctx), "429 with Retry-After is retried")
	assert.Equal(t, 2, s.RequestCount("/health/liveliness"))
}

func TestRetryBoundedByContext(t *testing.T) {
	s := newFake(t)
	c, err := litellm.New(litellm.WithBaseURL(s.URL), litellm.WithMasterKey(s.MasterKey()),
		litellm.WithRetry(5, time.Hour, time.Hour))
	require.NoError(t, err)
	s.FailNext("/health/liveliness", 10, http.StatusBadGateway, litellmtest.ShapeProxy)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = c.Liveliness(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, s.RequestCount("/health/liveliness"), "the hour-long wait was cut by the context")
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	c, err := litellm.New(litellm.WithBaseURL("http://"+addr), litellm.WithMasterKey("k"),
		litellm.WithRetry(2, time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	err = c.Liveliness(context.Background())
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Contains(t, err.Error(), "after 3 attempt(s)")
	var apiErr *litellm.APIError
	assert.False(t, errors.As(err, &apiErr), "no response, no APIError")
}

func TestMalformed(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	s.MalformNext("/v1/models", 1)
	_, err := c.Models(context.Background())
	assert.ErrorIs(t, err, litellm.ErrMalformed)

	s.MalformNext("/spend/logs/v2", 1)
	now := time.Now()
	_, err = c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{Start: now.Add(-time.Hour), End: now})
	assert.ErrorIs(t, err, litellm.ErrMalformed)
}

func TestModelsCatalog(t *testing.T) {
	s := newFake(t, litellmtest.WithModels(
		litellmtest.Model{Name: "big", Provider: "openai", MaxInputTokens: 128000, MaxOutputTokens: 16384, InputCostPerToken: 1e-6, OutputCostPerToken: 2e-6, Vision: true},
		litellmtest.Model{Name: "small", Provider: "anthropic", Reasoning: true},
	))
	c := newClient(t, s)
	got, err := c.Models(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []litellm.ModelInfo{
		{ID: "big", DisplayName: "big", OwnedBy: "openai", Provider: "openai", ContextWindow: 128000, MaxOutputTokens: 16384, InputCostPerToken: 1e-6, OutputCostPerToken: 2e-6, SupportsVision: true},
		{ID: "small", DisplayName: "small", OwnedBy: "anthropic", Provider: "anthropic", SupportsReasoning: true},
	}, got)

	s.FailNext("/model/info", 1, http.StatusForbidden, litellmtest.ShapeProxy)
	got, err = c.Models(context.Background())
	require.NoError(t, err, "without /model/info the plain list is the catalog")
	assert.Equal(t, []litellm.ModelInfo{
		{ID: "big", DisplayName: "big", OwnedBy: "openai"},
		{ID: "small", DisplayName: "small", OwnedBy: "anthropic"},
	}, got)
}

func TestHealthAndCustomer(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	ctx := context.Background()
	require.NoError(t, c.Liveliness(ctx))
	r, err := c.Readiness(ctx)
	require.NoError(t, err)
	assert.Equal(t, "connected", r.DB)

	s.SetUnhealthy("db down")
	_, err = c.Readiness(ctx)
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	var apiErr *litellm.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "Service Unhealthy (db down)", apiErr.Message)

	_, err = c.CustomerInfo(ctx, "acct-unknown")
	require.ErrorIs(t, err, errdefs.ErrNotFound)

	chat(t, s, "acct-7", "run-c", 0)
	cu, err := c.CustomerInfo(ctx, "acct-7")
	require.NoError(t, err)
	assert.Equal(t, "acct-7", cu.UserID)
	assert.Greater(t, cu.Spend, 0.0)
}

func TestDecodeFixture(t *testing.T) {
	// A page in the shape of a real /spend/logs/v2 answer: extra columns, a row of a
	// newer build (Z timestamps, litellm_call_id) and of an older one (+00:00,
	// numbers as strings, metadata as serialized JSON, attempt as a string).
	body, err := os.ReadFile("testdata/spend_logs_v2_page.json")
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer sk-x", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := litellm.New(litellm.WithBaseURL(srv.URL), litellm.WithMasterKey("sk-x"))
	require.NoError(t, err)
	rows, err := c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{
		Start: time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC), End: time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Len(t, rows, 2)

	a := rows[0]
	assert.Equal(t, "chatcmpl-7f3e2a9c-1b4d-4c5e-9f60-aa11bb22cc33", a.RequestID)
	assert.Equal(t, "4b8f1e2a-3c5d-4e6f-8a9b-0c1d2e3f4a5b", a.LitellmCallID)
	assert.Equal(t, 0.00042, a.Spend)
	assert.Equal(t, [3]int64{250, 60, 310}, [3]int64{a.PromptTokens, a.CompletionTokens, a.TotalTokens})
	assert.Equal(t, time.Date(2025, 6, 1, 10, 15, 30, 123456000, time.UTC), a.StartTime)
	assert.Equal(t, time.Date(2025, 6, 1, 10, 15, 31, 500000000, time.UTC), a.EndTime)
	assert.Equal(t, "gpt-4o-mini", a.ModelGroup)
	assert.Equal(t, "acct-fixture", a.EndUser)
	assert.Equal(t, "success", a.Status)
	assert.JSONEq(t, `{"run_id":"run-fixture","attempt":1,"graph_id":"g-1"}`, string(a.SpendLogsMetadata))
	run, attempt, ok := a.RunAttempt()
	assert.True(t, ok)
	assert.Equal(t, "run-fixture", run)
	assert.Equal(t, 1, attempt)

	b := rows[1]
	assert.Equal(t, 0.0000125, b.Spend)
	assert.Equal(t, int64(25), b.TotalTokens)
	assert.Equal(t, time.Date(2025, 6, 1, 10, 14, 2, 0, time.UTC), b.StartTime)
	assert.Equal(t, time.Date(2025, 6, 1, 10, 14, 3, 250000000, time.UTC), b.EndTime)
	assert.Equal(t, "", b.Status, "null reads as empty")
	run, attempt, ok = b.RunAttempt()
	assert.True(t, ok, "metadata as a JSON string, attempt as a string")
	assert.Equal(t, "run-fixture", run)
	assert.Equal(t, 1, attempt)

	var one litellm.SpendLog
	require.ErrorIs(t, json.Unmarshal([]byte(`{"request_id":"x","startTime":"yesterday"}`), &one), litellm.ErrMalformed)
}

func TestSpendLogsV2PagesPastCap(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	base := time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	const n = litellmtest.SpendCountCap + 1500
	s.Synthesize(n, base, 100*time.Millisecond, "acct-big")
	rows, err := c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{Start: base, End: base.Add(n * 100 * time.Millisecond), EndUser: "acct-big"})
	require.NoError(t, err)
	require.Len(t, rows, n, "every row, also past the capped total")
	seen := make(map[string]bool, n)
	for _, r := range rows {
		seen[r.RequestID] = true
	}
	assert.Len(t, seen, n)
	assert.Equal(t, 12, s.RequestCount("/spend/logs/v2"), "eleven full pages and a short one, no extra request")
	last := s.Requests()[len(s.Requests())-1].Query()
	assert.Equal(t, "1000", last.Get("page_size"))
	assert.Equal(t, "acct-big", last.Get("end_user"))
}

func TestSpendLogsV2Window(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	at := time.Date(2025, 8, 1, 12, 0, 5, 700_000_000, time.UTC)
	s.AddSpendRows(litellmtest.SpendRow{RequestID: "chatcmpl-edge", StartTime: at, EndTime: at})
	rows, err := c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{Start: at.Add(-time.Minute), End: at})
	require.NoError(t, err)
	require.Len(t, rows, 1, "the end is inclusive despite second precision")
	q := s.Requests()[0].Query()
	assert.Equal(t, "2025-08-01 12:00:06", q.Get("end_date"))
	assert.Equal(t, "2025-08-01 11:59:05", q.Get("start_date"))

	_, err = c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{End: at})
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
	_, err = c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{Start: at, End: at.Add(-time.Second)})
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
	_, err = c.SpendLogsV2(context.Background(), litellm.SpendLogsQuery{Start: at, End: at, PageSize: 1001})
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
}

func TestSpendLogsByRequestID(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	rec := chat(t, s, "acct-1", "run-l", 2)
	got, err := c.SpendLogsByRequestID(context.Background(), rec.RequestID)
	require.NoError(t, err)
	assert.Equal(t, rec.RequestID, got.RequestID)
	assert.Equal(t, rec.CallID, got.LitellmCallID)
	run, attempt, ok := got.RunAttempt()
	assert.Equal(t, []any{"run-l", 2, true}, []any{run, attempt, ok})

	_, err = c.SpendLogsByRequestID(context.Background(), "chatcmpl-missing")
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Contains(t, err.Error(), "chatcmpl-missing")
}

// called is what the per-run proxy's audit keeps of a call.
type called struct{ RequestID, CallID string }

// chat makes one non-streamed call the way the per-run proxy does (injected
// attribution headers) and returns its ids.
func chat(t testing.TB, s *litellmtest.Server, endUser, run string, attempt int) called {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	req.Header.Set("x-litellm-end-user-id", endUser)
	req.Header.Set("x-litellm-spend-logs-metadata", fmt.Sprintf(`{"run_id":%q,"attempt":%d}`, run, attempt))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return called{RequestID: body.ID, CallID: resp.Header.Get("x-litellm-call-id")}
}
