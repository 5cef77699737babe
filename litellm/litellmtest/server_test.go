package litellmtest_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func newServer(t *testing.T, opts ...litellmtest.Option) *litellmtest.Server {
	t.Helper()
	s := litellmtest.NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

func do(t *testing.T, s *litellmtest.Server, method, path string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if _, ok := hdr["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func chatBody(model, content string, extra string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}]%s}`, model, content, extra)
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func TestChatCompletion(t *testing.T) {
	s := newServer(t)
	resp, body := do(t, s, "POST", "/v1/chat/completions", map[string]string{"x-litellm-end-user-id": "acct-1"},
		chatBody("gpt-4o-mini", "say MARKER:abc123 back", ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	var out struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	assert.True(t, strings.HasPrefix(out.ID, "chatcmpl-"), out.ID)
	assert.Equal(t, "chat.completion", out.Object)
	assert.Equal(t, "gpt-4o-mini-2024-07-18", out.Model)
	require.Len(t, out.Choices, 1)
	assert.Equal(t, "ECHO:abc123", out.Choices[0].Message.Content)
	assert.Equal(t, "assistant", out.Choices[0].Message.Role)
	assert.Equal(t, "stop", out.Choices[0].FinishReason)

	callID := resp.Header.Get("x-litellm-call-id")
	assert.Regexp(t, uuidRe, callID)
	assert.NotEqual(t, out.ID, "chatcmpl-"+callID, "the body id and the call id are different values")
	assert.Equal(t, s.Models()[0].ID, resp.Header.Get("x-litellm-model-id"))
	assert.Len(t, s.Models()[0].ID, 64, "a deployment hash")

	rows := s.SpendRows()
	require.Len(t, rows, 1)
	row := rows[0]
	assert.Equal(t, out.ID, row.RequestID, "request_id is the body id")
	assert.Equal(t, callID, row.LitellmCallID)
	assert.Equal(t, "acct-1", row.EndUser)
	assert.Equal(t, out.Usage.PromptTokens, row.PromptTokens)
	assert.Equal(t, out.Usage.CompletionTokens, row.CompletionTokens)
	assert.Equal(t, out.Usage.PromptTokens+out.Usage.CompletionTokens, row.TotalTokens)
	m := litellmtest.DefaultModels[0]
	wantCost := float64(row.PromptTokens)*m.InputCostPerToken + float64(row.CompletionTokens)*m.OutputCostPerToken
	assert.InDelta(t, wantCost, row.Spend, 1e-12)
	hdrCost, err := strconv.ParseFloat(resp.Header.Get("x-litellm-response-cost"), 64)
	require.NoError(t, err)
	assert.InDelta(t, row.Spend, hdrCost, 1e-15)
	assert.Equal(t, litellmtest.HashKey(s.MasterKey()), row.APIKey)
	assert.Equal(t, "success", row.Status)

	reqs := s.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "/v1/chat/completions", reqs[0].Path)
	assert.Equal(t, "acct-1", reqs[0].Header.Get("x-litellm-end-user-id"))
	assert.Contains(t, string(reqs[0].Body), "MARKER:abc123")
}

func TestAttributionPrecedence(t *testing.T) {
	cases := map[string]struct {
		hdr      map[string]string
		extra    string
		endUser  string
		metadata any
	}{
		"customer header wins over end user header": {
			hdr: map[string]string{"x-litellm-customer-id": "cust", "x-litellm-end-user-id": "eu"}, endUser: "cust"},
		"end user header beats body user": {
			hdr: map[string]string{"x-litellm-end-user-id": "eu"}, extra: `,"user":"body-user"`, endUser: "eu"},
		"body user without headers": {extra: `,"user":"body-user"`, endUser: "body-user"},
		"metadata header replaces body metadata": {
			hdr:      map[string]string{"x-litellm-spend-logs-metadata": `{"run_id":"r1","attempt":2}`},
			extra:    `,"metadata":{"spend_logs_metadata":{"run_id":"spoofed","extra":true}}`,
			metadata: map[string]any{"run_id": "r1", "attempt": float64(2)}},
		"invalid metadata header is dropped, body kept": {
			hdr:      map[string]string{"x-litellm-spend-logs-metadata": `{"run_id":`},
			extra:    `,"metadata":{"spend_logs_metadata":{"run_id":"from-body"}}`,
			metadata: map[string]any{"run_id": "from-body"}},
		"invalid metadata header without body metadata": {
			hdr: map[string]string{"x-litellm-spend-logs-metadata": `not json`}, metadata: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newServer(t)
			resp, body := do(t, s, "POST", "/chat/completions", tc.hdr, chatBody("claude-haiku", "hi", tc.extra))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			rows := s.SpendRows()
			require.Len(t, rows, 1)
			assert.Equal(t, tc.endUser, rows[0].EndUser)
			assert.Equal(t, tc.metadata, rows[0].Metadata["spend_logs_metadata"])
		})
	}
}

func TestAuth(t *testing.T) {
	s := newServer(t, litellmtest.WithMasterKey("sk-right"))
	type errBody struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   string `json:"param"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	for name, hdr := range map[string]map[string]string{
		"no key":    {"Authorization": ""},
		"wrong key": {"Authorization": "Bearer sk-wrong"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := do(t, s, "GET", "/v1/models", hdr, "")
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			var e errBody
			require.NoError(t, json.Unmarshal(body, &e))
			assert.Equal(t, "401", e.Error.Code, "code is a string")
			assert.Equal(t, "auth_error", e.Error.Type)
			assert.Contains(t, e.Error.Message, "Authentication Error")
			assert.NotContains(t, string(body), "sk-wrong", "the presented key is not echoed whole")
		})
	}
	resp, _ := do(t, s, "GET", "/v1/models", map[string]string{"Authorization": "", "x-litellm-api-key": "sk-right"}, "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "x-litellm-api-key is accepted")

	resp, body := do(t, s, "GET", "/health/liveliness", map[string]string{"Authorization": ""}, "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"I'm alive!"`, string(body))
}

func readSSE(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out, sc.Err()
}

func stream(t *testing.T, s *litellmtest.Server, extra string) (*http.Response, []string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions",
		strings.NewReader(chatBody("gpt-4o-mini", "MARKER:s1", `,"stream":true`+extra)))
	req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	events, err := readSSE(t, resp.Body)
	return resp, events, err
}

func TestStreaming(t *testing.T) {
	s := newServer(t, litellmtest.WithReply(func(litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "one two three", PromptTokens: 7, CompletionTokens: 3}
	}))
	resp, events, err := stream(t, s, `,"stream_options":{"include_usage":true}`)
	require.NoError(t, err)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Len(t, events, 6, "3 deltas, the finish chunk, the usage chunk, [DONE]: %q", events)
	var text strings.Builder
	var id string
	for i, e := range events[:3] {
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Choices []struct {
				Delta struct{ Role, Content string } `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(e), &c))
		assert.Equal(t, "chat.completion.chunk", c.Object)
		if i == 0 {
			assert.Equal(t, "assistant", c.Choices[0].Delta.Role)
			id = c.ID
		}
		assert.Equal(t, id, c.ID, "every chunk carries the same id")
		text.WriteString(c.Choices[0].Delta.Content)
	}
	assert.Equal(t, "one two three", text.String())
	assert.Contains(t, events[3], `"finish_reason":"stop"`)
	var usage struct {
		Choices []any `json:"choices"`
		Usage   usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(events[4]), &usage))
	assert.Empty(t, usage.Choices, "the usage chunk has no choices")
	assert.Equal(t, 10, usage.Usage.TotalTokens)
	assert.Equal(t, "[DONE]", events[5])

	rows := s.SpendRows()
	require.Len(t, rows, 1)
	assert.Equal(t, id, rows[0].RequestID)
	assert.Equal(t, resp.Header.Get("x-litellm-call-id"), rows[0].LitellmCallID)
	assert.Equal(t, 10, rows[0].TotalTokens)

	// Without include_usage there is no usage chunk.
	_, events, err = stream(t, s, "")
	require.NoError(t, err)
	require.Len(t, events, 5)
	assert.NotContains(t, strings.Join(events, "\n"), `"usage"`)
}

func TestStreamFaults(t *testing.T) {
	s := newServer(t)
	s.ErrorStreamAfter(0)
	resp, events, err := stream(t, s, "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "LiteLLM reports mid-stream errors with status 200")
	require.Len(t, events, 1)
	var e struct {
		Error struct{ Message, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(events[0]), &e))
	assert.Equal(t, "500", e.Error.Code)
	rows := s.SpendRows()
	require.Len(t, rows, 1)
	assert.Equal(t, "failure", rows[0].Status)
	assert.Zero(t, rows[0].Spend)

	s.DropStreamAfter(1)
	_, events, err = stream(t, s, "")
	require.Error(t, err, "the connection is cut mid-stream")
	assert.Len(t, events, 1)
	assert.Len(t, s.SpendRows(), 1, "a dropped stream writes no row")

	// One-shot: the next stream is whole again.
	_, events, err = stream(t, s, "")
	require.NoError(t, err)
	assert.Equal(t, "[DONE]", events[len(events)-1])
}

type v2Page struct {
	Data []struct {
		RequestID string `json:"request_id"`
		EndUser   string `json:"end_user"`
		StartTime string `json:"startTime"`
	} `json:"data"`
	Total         int  `json:"total"`
	Page          int  `json:"page"`
	PageSize      int  `json:"page_size"`
	TotalPages    int  `json:"total_pages"`
	TotalIsCapped bool `json:"total_is_capped"`
}

func getV2(t *testing.T, s *litellmtest.Server, q url.Values) (int, v2Page, []byte) {
	t.Helper()
	resp, body := do(t, s, "GET", "/spend/logs/v2?"+q.Encode(), nil, "")
	var p v2Page
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &p), string(body))
	}
	return resp.StatusCode, p, body
}

func TestSpendLogsV2(t *testing.T) {
	s := newServer(t)
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	s.Synthesize(SpendCapPlus, base, time.Second, "alice", "bob")
	window := url.Values{"start_date": {"2025-03-01"}, "end_date": {"2025-03-02 00:00:00"}}

	t.Run("validation", func(t *testing.T) {
		status, _, body := getV2(t, s, url.Values{"start_date": {"2025-03-01"}})
		assert.Equal(t, http.StatusBadRequest, status)
		assert.JSONEq(t, `{"error":{"message":"Start date and end date are required","type":"bad_request","param":"None","code":"400"}}`, string(body))

		q := url.Values{"page_size": {"1001"}}
		for k, v := range window {
			q[k] = v
		}
		status, _, body = getV2(t, s, q)
		assert.Equal(t, http.StatusUnprocessableEntity, status)
		assert.Contains(t, string(body), `"loc":["query","page_size"]`)
		assert.Contains(t, string(body), "less than or equal to 1000")

		status, _, _ = getV2(t, s, url.Values{"start_date": {"2025-03-01T00:00:00Z"}, "end_date": {"2025-03-02"}})
		assert.Equal(t, http.StatusBadRequest, status, "RFC 3339 is not one of the accepted formats")
	})

	t.Run("cap and paging", func(t *testing.T) {
		q := url.Values{"page_size": {"1000"}, "page": {"1"}}
		for k, v := range window {
			q[k] = v
		}
		status, p, _ := getV2(t, s, q)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, litellmtest.SpendCountCap, p.Total)
		assert.True(t, p.TotalIsCapped)
		assert.Equal(t, 10, p.TotalPages)
		require.Len(t, p.Data, 1000)
		assert.Equal(t, fmt.Sprintf("chatcmpl-synth-%07d", SpendCapPlus-1), p.Data[0].RequestID, "newest first")

		q.Set("page", "11")
		_, p, _ = getV2(t, s, q)
		assert.Len(t, p.Data, SpendCapPlus-10000, "pages past total_pages still return rows")
		assert.Equal(t, "chatcmpl-synth-0000000", p.Data[len(p.Data)-1].RequestID)
		q.Set("page", "12")
		_, p, _ = getV2(t, s, q)
		assert.Empty(t, p.Data)
	})

	t.Run("filters", func(t *testing.T) {
		q := url.Values{"end_user": {"alice"}, "page_size": {"5"}, "start_date": {"2025-03-01 00:00:00"}, "end_date": {"2025-03-01 00:00:09"}}
		_, p, _ := getV2(t, s, q)
		assert.Equal(t, 5, p.Total, "seconds 0..9 inclusive, every other row")
		assert.False(t, p.TotalIsCapped)
		for _, d := range p.Data {
			assert.Equal(t, "alice", d.EndUser)
		}
		assert.Equal(t, "2025-03-01T00:00:08+00:00", p.Data[0].StartTime)

		s.IgnoreEndUserFilter(true)
		_, p, _ = getV2(t, s, q)
		s.IgnoreEndUserFilter(false)
		assert.Equal(t, 10, p.Total, "the filter is ignored")

		_, p, _ = getV2(t, s, url.Values{"request_id": {"chatcmpl-synth-0000003"}, "start_date": {"2025-03-01"}, "end_date": {"2025-03-02"}})
		require.Len(t, p.Data, 1)
		assert.Equal(t, "bob", p.Data[0].EndUser)
	})
}

// SpendCapPlus is a row count just past LiteLLM's count cap.
const SpendCapPlus = litellmtest.SpendCountCap + 321

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock(t time.Time) *clock    { return &clock{t: t} }
func dayWindow(t time.Time) url.Values {
	return url.Values{"start_date": {t.Format(time.DateOnly)}, "end_date": {t.Add(24 * time.Hour).Format(time.DateOnly)}}
}

func TestBatchWriteDelay(t *testing.T) {
	clk := newClock(time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC))
	s := newServer(t, litellmtest.WithClock(clk.now), litellmtest.WithBatchWriteDelay(10*time.Second))
	resp, _ := do(t, s, "POST", "/v1/chat/completions", nil, chatBody("gpt-4o-mini", "hi", ""))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, s.SpendRows(), 1, "the row is written")

	_, p, _ := getV2(t, s, dayWindow(clk.now()))
	assert.Empty(t, p.Data, "but not visible before the batch write")
	clk.add(9 * time.Second)
	_, p, _ = getV2(t, s, dayWindow(clk.now()))
	assert.Empty(t, p.Data)
	clk.add(time.Second)
	_, p, _ = getV2(t, s, dayWindow(clk.now()))
	assert.Len(t, p.Data, 1)
}

func TestLegacySpendLogs(t *testing.T) {
	s := newServer(t)
	day := time.Date(2025, 5, 2, 10, 0, 0, 0, time.UTC)
	s.Synthesize(3, day, time.Hour)

	resp, body := do(t, s, "GET", "/spend/logs?request_id=chatcmpl-synth-0000001", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(body, &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, "chatcmpl-synth-0000001", rows[0]["request_id"])

	_, body = do(t, s, "GET", "/spend/logs?request_id=chatcmpl-nope", nil, "")
	assert.Equal(t, "[null]", string(body), "find_unique of nothing")

	_, body = do(t, s, "GET", "/spend/logs?start_date=2025-05-02&end_date=2025-05-04", nil, "")
	var daily []map[string]any
	require.NoError(t, json.Unmarshal(body, &daily))
	require.Len(t, daily, 3, "one day with rows, then zero days up to end_date: %s", body)
	assert.Equal(t, "2025-05-02", daily[0]["startTime"])
	assert.NotContains(t, daily[0], "request_id", "aggregates, not rows")
	assert.Greater(t, daily[0]["spend"], 0.0)
	assert.Equal(t, "2025-05-04", daily[2]["startTime"])
	assert.Equal(t, 0.0, daily[2]["spend"])

	_, body = do(t, s, "GET", "/spend/logs?start_date=2025-05-01&end_date=2025-05-02", nil, "")
	assert.Equal(t, "[]", string(body), "end_date is compared as its midnight, so that day's rows are out")

	_, body = do(t, s, "GET", "/spend/logs?start_date=2025-05-02&end_date=2025-05-04&summarize=false", nil, "")
	require.NoError(t, json.Unmarshal(body, &rows))
	assert.Len(t, rows, 3)

	resp, body = do(t, s, "GET", "/spend/logs?start_date=2025-05-02+00:00:00&end_date=2025-05-04", nil, "")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Contains(t, string(body), "does not match format")
}

func TestFaultsAndHealth(t *testing.T) {
	s := newServer(t)
	s.FailNext("/v1/models", 2, http.StatusServiceUnavailable, litellmtest.ShapeDetailString)
	for range 2 {
		resp, body := do(t, s, "GET", "/v1/models", nil, "")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.JSONEq(t, `{"detail":"Service Unavailable"}`, string(body))
	}
	resp, body := do(t, s, "GET", "/v1/models", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"object":"list","data":[
		{"id":"gpt-4o-mini","object":"model","created":1677610602,"owned_by":"openai"},
		{"id":"claude-haiku","object":"model","created":1677610602,"owned_by":"anthropic"}]}`, string(body))

	s.MalformNext("/model/info", 1)
	_, body = do(t, s, "GET", "/model/info", nil, "")
	assert.False(t, json.Valid(body))

	s.SetUnhealthy("db down")
	resp, body = do(t, s, "GET", "/health/readiness", map[string]string{"Authorization": ""}, "")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.JSONEq(t, `{"detail":"Service Unhealthy (db down)"}`, string(body))

	resp, body = do(t, s, "GET", "/customer/info?end_user_id=ghost", nil, "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.JSONEq(t, `{"error":{"message":"End User Id=ghost does not exist in db","type":"not_found","param":"end_user_id","code":"404"}}`, string(body))
}
