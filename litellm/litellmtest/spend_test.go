package litellmtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// pageIDs fetches one /spend/logs/v2 page and returns its request ids in order.
func pageIDs(t *testing.T, s *litellmtest.Server, q url.Values) []string {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL+"/spend/logs/v2?"+q.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body struct {
		Data []struct {
			RequestID string `json:"request_id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	ids := make([]string, len(body.Data))
	for i, d := range body.Data {
		ids[i] = d.RequestID
	}
	return ids
}

// LiteLLM's order (startTime descending, request_id descending on ties) and offset
// paging: a row written between two page requests shifts the second page.
func TestSpendLogsV2OrderAndOffsetPaging(t *testing.T) {
	s := litellmtest.NewServer()
	defer s.Close()
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	row := func(id string, st time.Time, endUser string) litellmtest.SpendRow {
		return litellmtest.SpendRow{RequestID: id, StartTime: st, EndTime: st, EndUser: endUser}
	}
	s.AddSpendRows(row("chatcmpl-a", at, "u1"), row("chatcmpl-c", at, "u1"), row("chatcmpl-b", at, "u2"),
		row("chatcmpl-old", at.Add(-time.Minute), "u1"), row("chatcmpl-outside", at.Add(time.Hour), "u1"))
	q := url.Values{"start_date": {"2025-05-06 07:00:00"}, "end_date": {"2025-05-06 07:08:09"}, "page_size": {"2"}}

	q.Set("page", "1")
	assert.Equal(t, []string{"chatcmpl-c", "chatcmpl-b"}, pageIDs(t, s, q), "newest first, request_id breaks ties, end_date inclusive")

	writes := 0
	s.BeforeSpendLogsPage(func(got url.Values) {
		writes++
		assert.Equal(t, "2", got.Get("page"), "the hook sees the request's query")
		s.AddSpendRows(row(fmt.Sprintf("chatcmpl-new%d", writes), at.Add(-time.Second), "u1"))
	})
	q.Set("page", "2")
	assert.Equal(t, []string{"chatcmpl-a", "chatcmpl-new1"}, pageIDs(t, s, q), "the row written before the request is served at once")
	s.BeforeSpendLogsPage(nil)
	q.Set("page", "3")
	assert.Equal(t, []string{"chatcmpl-old"}, pageIDs(t, s, q))
	assert.Equal(t, 1, writes)

	q.Set("page", "1")
	q.Set("end_user", "u2")
	assert.Equal(t, []string{"chatcmpl-b"}, pageIDs(t, s, q))
	s.IgnoreEndUserFilter(true)
	assert.Equal(t, []string{"chatcmpl-c", "chatcmpl-b"}, pageIDs(t, s, q), "a release without the end_user parameter")
}
