package litellm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// rowsAt returns n rows of endUser starting at start, step apart, with request ids
// prefix-000, prefix-001, ...
func rowsAt(n int, start time.Time, step time.Duration, prefix, endUser string) []litellmtest.SpendRow {
	out := make([]litellmtest.SpendRow, n)
	for i := range out {
		at := start.Add(time.Duration(i) * step)
		out[i] = litellmtest.SpendRow{RequestID: fmt.Sprintf("%s-%03d", prefix, i), StartTime: at, EndTime: at.Add(time.Second),
			EndUser: endUser, Model: "gpt-4o-mini", Spend: 0.001, Status: "success"}
	}
	return out
}

// walk collects the request ids WalkSpendLogs passes, counting repeats.
func walk(t *testing.T, c *litellm.Client, q litellm.SpendLogsQuery) (ids []string, repeats int, err error) {
	t.Helper()
	seen := map[string]bool{}
	err = c.WalkSpendLogs(context.Background(), q, func(raw litellm.RawSpendLog) bool {
		var l litellm.SpendLog
		require.NoError(t, raw.Decode(&l))
		if seen[l.RequestID] {
			repeats++
		}
		seen[l.RequestID] = true
		ids = append(ids, l.RequestID)
		return true
	})
	return ids, repeats, err
}

// A busy proxy writes exactly a page of newer rows before every page request: by
// offset, every page would repeat the previous one forever. The walk still passes
// every row of the window once and ends.
func TestWalkSpendLogsWhileAPageOfNewerRowsArrivesBeforeEachPage(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	const size = 10
	now := time.Now().UTC().Truncate(time.Second)
	old := rowsAt(35, now.Add(-30*time.Minute), 7*time.Second, "chatcmpl-old", "acct-1")
	s.AddSpendRows(old...)

	var mu sync.Mutex
	batch := 0
	s.BeforeSpendLogsPage(func(url.Values) {
		mu.Lock()
		defer mu.Unlock()
		batch++
		s.AddSpendRows(rowsAt(size, now.Add(time.Duration(batch)*time.Second), time.Millisecond, fmt.Sprintf("chatcmpl-new%02d", batch), "acct-1")...)
	})
	ids, repeats, err := walk(t, c, litellm.SpendLogsQuery{Start: now.Add(-time.Hour), End: now.Add(time.Hour), PageSize: size})
	require.NoError(t, err)
	assert.Zero(t, repeats, "no row is passed twice")
	got := map[string]bool{}
	for _, id := range ids {
		got[id] = true
	}
	for _, r := range old {
		assert.True(t, got[r.RequestID], "row %s of the window is passed", r.RequestID)
	}
	assert.LessOrEqual(t, s.RequestCount("/spend/logs/v2"), 6, "the walk ends: 35 old rows and the first batch at 10 a page")
}

// More rows than a page share one second: the walk pages by offset inside it, and
// newer rows arriving meanwhile cannot enter the window.
func TestWalkSpendLogsPageWithinOneSecond(t *testing.T) {
	s := newFake(t)
	c := newClient(t, s)
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	same := rowsAt(25, at, time.Microsecond, "chatcmpl-same", "acct-1")
	older := rowsAt(3, at.Add(-time.Minute), time.Second, "chatcmpl-older", "acct-1")
	s.AddSpendRows(same...)
	s.AddSpendRows(older...)
	n := 0
	s.BeforeSpendLogsPage(func(url.Values) {
		n++
		s.AddSpendRows(rowsAt(10, at.Add(time.Duration(n)*time.Second+time.Millisecond), time.Millisecond, fmt.Sprintf("chatcmpl-late%d", n), "acct-1")...)
	})
	ids, repeats, err := walk(t, c, litellm.SpendLogsQuery{Start: at.Add(-time.Hour), End: at.Add(500 * time.Millisecond), PageSize: 10})
	require.NoError(t, err)
	assert.Zero(t, repeats)
	assert.Len(t, ids, 28, "the 25 rows of the second and the 3 older ones, nothing newer")
	for _, r := range append(same, older...) {
		assert.Contains(t, ids, r.RequestID)
	}
}

// A server that ignores "page" while a full page shares one second would keep the
// walk there forever: it ends with ErrMalformed.
func TestWalkSpendLogsServerIgnoringPage(t *testing.T) {
	page := `{"data":[`
	for i := range 3 {
		if i > 0 {
			page += ","
		}
		page += fmt.Sprintf(`{"request_id":"chatcmpl-%d","startTime":"2025-03-04T05:06:07.%06d+00:00"}`, i, 900-i)
	}
	page += `],"total":30,"page":1,"page_size":3,"total_pages":10,"total_is_capped":false}`
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	c, err := litellm.New(litellm.WithBaseURL(srv.URL), litellm.WithMasterKey("sk-x"))
	require.NoError(t, err)
	at := time.Date(2025, 3, 4, 5, 6, 8, 0, time.UTC)
	ids, _, err := walk(t, c, litellm.SpendLogsQuery{Start: at.Add(-time.Hour), End: at, PageSize: 3})
	require.ErrorIs(t, err, litellm.ErrMalformed)
	assert.Contains(t, err.Error(), "repeats earlier rows")
	assert.Equal(t, []string{"chatcmpl-0", "chatcmpl-1", "chatcmpl-2"}, ids, "each row passed once")
	assert.Equal(t, 4, requests, "one page, then three that bring nothing new")
}
