package litellm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/internal/jsonscan"
)

// MaxPageSize is the largest page LiteLLM's /spend/logs/v2 serves.
const MaxPageSize = 1000

// SpendLog is one row of LiteLLM's spend log. Decoding tolerates fields it does not
// know, numbers sent as strings, nulls, and timestamps ending in "Z" or "+00:00",
// with or without fractions (or without a zone, read as UTC).
type SpendLog struct {
	// RequestID is the response body's id ("chatcmpl-..."), the row's key.
	RequestID string
	// LitellmCallID is the x-litellm-call-id response header, stored by newer
	// LiteLLM builds; empty on older ones.
	LitellmCallID    string
	CallType         string
	APIKey           string // hex SHA-256 of the key used
	Spend            float64
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	StartTime        time.Time
	EndTime          time.Time
	Model            string
	ModelID          string
	ModelGroup       string
	Provider         string // custom_llm_provider
	User             string
	EndUser          string
	TeamID           string
	SessionID        string
	Status           string
	// Metadata is the row's metadata object as raw JSON; SpendLogsMetadata its
	// spend_logs_metadata member (the x-litellm-spend-logs-metadata a call carried).
	Metadata          json.RawMessage
	SpendLogsMetadata json.RawMessage

	bad *BadRowError // the first impossible value, see Check
}

// Check returns a *BadRowError (ErrBadRow) when the row had a spend that is
// not a finite non-negative number, or a token count that is not a
// non-negative integer (or a value that is neither a number nor null); such
// values were read as zero. Nil for a sound row.
func (l *SpendLog) Check() error {
	if l.bad == nil {
		return nil
	}
	b := *l.bad
	b.RequestID, b.LitellmCallID = l.RequestID, l.LitellmCallID
	return &b
}

// number reads a numeric column; a value that is not a finite non-negative
// number (an integer for tokens) or null is recorded as the row's first bad one.
func (l *SpendLog) number(field string, v []byte, integer bool) float64 {
	if isNull(v) {
		return 0
	}
	f, ok := numVal(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || integer && (f != math.Trunc(f) || f > 1<<53) {
		if l.bad == nil {
			val := string(v)
			if len(val) > 64 {
				val = val[:64]
			}
			l.bad = &BadRowError{Field: field, Value: val}
		}
		return 0
	}
	return f
}

// UnmarshalJSON decodes one row.
func (l *SpendLog) UnmarshalJSON(b []byte) error {
	if !json.Valid(b) {
		return malformed("spend log", "invalid JSON")
	}
	return l.decode(b)
}

// decode fills l from a valid JSON object, copying what it keeps.
func (l *SpendLog) decode(b []byte) error { return l.decodeRaw(b, true) }

// decodeLean is decode for a row that is read and dropped at once: Metadata and
// SpendLogsMetadata alias b instead of being copied.
func (l *SpendLog) decodeLean(b []byte) error { return l.decodeRaw(b, false) }

func (l *SpendLog) decodeRaw(b []byte, copyRaw bool) error {
	b = b[jsonscan.Space(b, 0):]
	if len(b) == 0 || b[0] != '{' {
		return malformed("spend log", "row is not an object")
	}
	*l = SpendLog{}
	var err error
	eachMember(b, func(k, v []byte) bool {
		switch string(k) {
		case "request_id":
			l.RequestID = strVal(v)
		case "litellm_call_id":
			l.LitellmCallID = strVal(v)
		case "call_type":
			l.CallType = strVal(v)
		case "api_key":
			l.APIKey = strVal(v)
		case "spend":
			l.Spend = l.number("spend", v, false)
		case "prompt_tokens":
			l.PromptTokens = int64(l.number("prompt_tokens", v, true))
		case "completion_tokens":
			l.CompletionTokens = int64(l.number("completion_tokens", v, true))
		case "total_tokens":
			l.TotalTokens = int64(l.number("total_tokens", v, true))
		case "startTime":
			l.StartTime, err = parseTime(v)
		case "endTime":
			var e error
			if l.EndTime, e = parseTime(v); e != nil {
				err = e
			}
		case "model":
			l.Model = strVal(v)
		case "model_id":
			l.ModelID = strVal(v)
		case "model_group":
			l.ModelGroup = strVal(v)
		case "custom_llm_provider":
			l.Provider = strVal(v)
		case "user":
			l.User = strVal(v)
		case "end_user":
			l.EndUser = strVal(v)
		case "team_id":
			l.TeamID = strVal(v)
		case "session_id":
			l.SessionID = strVal(v)
		case "status":
			l.Status = strVal(v)
		case "metadata":
			if md := objectOf(v); md != nil {
				l.Metadata = md
				if copyRaw {
					l.Metadata = append(json.RawMessage(nil), md...)
				}
				eachMember(md, func(mk, mv []byte) bool {
					if keyIs(mk, "spend_logs_metadata") {
						if slm := objectOf(mv); slm != nil {
							l.SpendLogsMetadata = slm
							if copyRaw {
								l.SpendLogsMetadata = append(json.RawMessage(nil), slm...)
							}
						}
						return false
					}
					return true
				})
			}
		}
		return err == nil
	})
	return err
}

// timeLayouts are the timestamp forms LiteLLM deployments return.
var timeLayouts = []string{
	time.RFC3339Nano,                // 2025-01-02T03:04:05.123456+00:00, ...Z
	"2006-01-02T15:04:05.999999999", // naive, UTC
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

func parseTime(v []byte) (time.Time, error) {
	s := strVal(v)
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, malformed("spend log", "timestamp %q", s)
}

// RunAttempt reads run_id and attempt from the row's spend_logs_metadata; ok is false
// when either is missing. attempt may be a number or a numeric string.
func (l *SpendLog) RunAttempt() (runID string, attempt int, ok bool) {
	return runAttempt(l.SpendLogsMetadata)
}

func runAttempt(slm []byte) (runID string, attempt int, ok bool) {
	var haveRun, haveAttempt bool
	eachMember(slm, func(k, v []byte) bool {
		switch {
		case keyIs(k, "run_id"):
			if len(v) > 0 && v[0] == '"' {
				runID, haveRun = strVal(v), true
			}
		case keyIs(k, "attempt"):
			if n, good := intVal(v); good {
				attempt, haveAttempt = int(n), true
			}
		}
		return true // Python's json keeps the last duplicate; so do we
	})
	return runID, attempt, haveRun && haveAttempt
}

// HashKey returns the form LiteLLM stores keys in spend rows and filters on: the hex
// SHA-256 of the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// SpendLogsQuery selects rows of /spend/logs/v2. Start and End are required; the
// window is inclusive at both ends and sent in UTC at second precision (Start rounded
// down, End rounded up, so no row of the window is lost to rounding).
type SpendLogsQuery struct {
	Start, End time.Time
	// EndUser filters on end_user. Some deployments ignore it: check the rows.
	EndUser string
	// RequestID filters on request_id.
	RequestID string
	// APIKeyHash filters on the key's hash (HashKey), not the key.
	APIKeyHash string
	// Model filters on the row's model; UserID on its user (key owner).
	Model, UserID string
	// Status filters on status ("success" or "failure").
	Status string
	// PageSize is the page size, 1 to MaxPageSize (0 means MaxPageSize).
	PageSize int
	// MaxRequests bounds the requests of one walk (WalkSpendLogs; 0 means
	// DefaultMaxWalkRequests): past it the walk ends with a *WalkLimitError, so
	// a spend API whose pages never end or whose cursor loops cannot keep it
	// going until the caller's deadline.
	MaxRequests int
	// OnRequest, if set, is called before each request of a walk (for a caller
	// that bounds the requests of several walks together).
	OnRequest func()
}

// DefaultMaxWalkRequests is SpendLogsQuery.MaxRequests' default: a million rows
// at the largest page size.
const DefaultMaxWalkRequests = 1000

func (q *SpendLogsQuery) values() (url.Values, int, error) {
	if q.Start.IsZero() || q.End.IsZero() {
		return nil, 0, errdefs.Invalidf("spend logs query needs Start and End")
	}
	if q.End.Before(q.Start) {
		return nil, 0, errdefs.Invalidf("spend logs query ends (%s) before it starts (%s)", q.End, q.Start)
	}
	size := q.PageSize
	if size == 0 {
		size = MaxPageSize
	}
	if size < 1 || size > MaxPageSize {
		return nil, 0, errdefs.Invalidf("page size %d out of range [1, %d]", size, MaxPageSize)
	}
	start := q.Start.UTC().Truncate(time.Second)
	end := q.End.UTC()
	if t := end.Truncate(time.Second); !t.Equal(end) {
		end = t.Add(time.Second)
	}
	v := url.Values{}
	v.Set("start_date", start.Format(time.DateTime))
	v.Set("end_date", end.Format(time.DateTime))
	v.Set("page_size", strconv.Itoa(size))
	for k, val := range map[string]string{"end_user": q.EndUser, "request_id": q.RequestID, "api_key": q.APIKeyHash,
		"model": q.Model, "user_id": q.UserID, "status_filter": q.Status} {
		if val != "" {
			v.Set(k, val)
		}
	}
	return v, size, nil
}

// RawSpendLog is one spend-log row as LiteLLM sent it: a valid JSON object. It is
// only valid during the WalkSpendLogs callback that received it.
type RawSpendLog []byte

// Decode fills l from the row without copying it: l.Metadata and
// l.SpendLogsMetadata alias r, so copy them to keep them past the callback.
// Errors wrap ErrMalformed.
func (r RawSpendLog) Decode(l *SpendLog) error { return l.decodeLean(r) }

// EndUser returns the row's end_user without decoding the rest of it ("" when it
// is missing or null).
func (r RawSpendLog) EndUser() string {
	var eu string
	eachMember(r, func(k, v []byte) bool {
		if string(k) == "end_user" {
			eu = strVal(v)
			return false
		}
		return true
	})
	return eu
}

// maxStuckPages bounds the offset pages read inside one second without a single
// new row. Only a server that ignores "page" gets there, or one that writes a page
// of rows into that very second before every request; a later walk, once the
// second has settled, gets past it.
const maxStuckPages = 3

// WalkSpendLogs calls fn with each row of /spend/logs/v2 matching q, newest first,
// until fn returns false or the window is exhausted. Each row is passed once.
//
// LiteLLM pages by offset over rows ordered by startTime descending, so on a busy
// proxy every row written between two requests shifts the next page. The walk
// therefore pages by time: each request asks for the first page of [q.Start,
// cursor], where the cursor is the oldest row seen so far rounded up to the second
// (the precision of end_date). New rows, which start later, fall outside the
// window; the rows of the cursor's second that are read again are skipped. Only
// when a whole page lies within one second does the walk page by offset inside
// that second. A row written late with an older startTime is found when it is in
// the part of the window still ahead, else by the next walk.
//
// Errors: errdefs.ErrInvalidSpec for a bad query, *APIError for LiteLLM's errors,
// ErrMalformed for undecodable pages (or when, inside one second, three pages in a
// row bring nothing new), errdefs.ErrUnavailable when LiteLLM cannot be reached,
// and the context's error.
func (c *Client) WalkSpendLogs(ctx context.Context, q SpendLogsQuery, fn func(row RawSpendLog) bool) error {
	const path = "/spend/logs/v2"
	vals, size, err := q.values()
	if err != nil {
		return err
	}
	end, _ := time.Parse(time.DateTime, vals.Get("end_date"))
	page, stuck := 1, 0
	limit := q.MaxRequests
	if limit <= 0 {
		limit = DefaultMaxWalkRequests
	}
	requests := 0
	// seen holds the rows already passed whose startTime is at or before the
	// cursor: the only rows a later request can return again.
	seen := map[string]time.Time{}
	var minSeen time.Time
	var elems [][]byte
	for {
		if requests >= limit {
			return &WalkLimitError{Path: path, Requests: requests}
		}
		requests++
		if q.OnRequest != nil {
			q.OnRequest()
		}
		vals.Set("end_date", end.Format(time.DateTime))
		vals.Set("page", strconv.Itoa(page))
		var (
			rows, fresh, totalPages int
			capped, stop            bool
			oldest                  time.Time
		)
		err := c.get(ctx, path, vals, func(body []byte) error {
			var err error
			if elems, totalPages, capped, err = spendPage(path, page, body, elems[:0]); err != nil {
				return err
			}
			rows = len(elems)
			if rows == 0 {
				return nil
			}
			if oldest, err = rowStart(elems[rows-1]); err != nil {
				return err
			}
			checking := len(seen) > 0
			for _, v := range elems {
				if checking {
					id, st, err := rowKey(v)
					if err != nil {
						return err
					}
					if st.Before(minSeen) {
						checking = false // older than every row passed: new from here on
					} else if _, dup := seen[string(id)]; dup {
						continue
					}
				}
				fresh++
				if !fn(RawSpendLog(v)) {
					stop = true
					return nil
				}
			}
			minSeen = oldest
			return rememberSeen(seen, elems, oldest, end)
		})
		if err != nil {
			return err
		}
		c.log.Debug("litellm: spend logs page", "end", end, "page", page, "rows", rows, "new", fresh, "capped", capped)
		switch {
		case stop, rows == 0, rows < size:
			return nil
		case !capped && totalPages > 0 && page >= totalPages:
			return nil
		}
		if next := ceilSecond(oldest); next.Before(end) {
			end, page, stuck = next, 1, 0
			continue
		}
		// A whole page within the cursor's second: page by offset inside it.
		if fresh == 0 {
			if stuck++; stuck >= maxStuckPages {
				return malformed(path, "page %d of the rows ending %s repeats earlier rows %d times", page, end.Format(time.DateTime), stuck)
			}
		} else {
			stuck = 0
		}
		page++
	}
}

// spendPage decodes one page of /spend/logs/v2: its rows (appended to elems),
// total_pages and total_is_capped.
func spendPage(path string, page int, body []byte, elems [][]byte) (_ [][]byte, totalPages int, capped bool, _ error) {
	if !json.Valid(body) {
		return elems, 0, false, malformed(path, "page %d is not valid JSON", page)
	}
	var data []byte
	seenData := false
	eachMember(body, func(k, v []byte) bool {
		switch string(k) {
		case "data":
			data, seenData = v, true
		case "total_pages":
			n, _ := intVal(v)
			totalPages = int(n)
		case "total_is_capped":
			capped = string(v) == "true"
		}
		return true
	})
	if !seenData || len(data) == 0 || data[0] != '[' {
		return elems, 0, false, malformed(path, "page %d has no data array", page)
	}
	eachElem(data, func(v []byte) bool {
		elems = append(elems, v)
		return true
	})
	return elems, totalPages, capped, nil
}

// rememberSeen keeps in seen the rows the next request may return again: those of
// the page (elems, oldest last) at or before the next cursor, and forgets the
// older cursor's.
func rememberSeen(seen map[string]time.Time, elems [][]byte, oldest, end time.Time) error {
	next := ceilSecond(oldest)
	if !next.Before(end) {
		next = end
	}
	for k, st := range seen {
		if st.After(next) {
			delete(seen, k)
		}
	}
	for i := len(elems) - 1; i >= 0; i-- {
		id, st, err := rowKey(elems[i])
		if err != nil {
			return err
		}
		if st.After(next) {
			break
		}
		if _, ok := seen[string(id)]; !ok {
			seen[string(id)] = st
		}
	}
	return nil
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}

// rowStart reads a raw row's startTime.
func rowStart(v []byte) (time.Time, error) {
	var st time.Time
	var err error
	found := false
	eachMember(v, func(k, val []byte) bool {
		if string(k) == "startTime" {
			st, err = parseTime(val)
			found = true
			return false
		}
		return true
	})
	if err == nil && (!found || st.IsZero()) {
		err = malformed("/spend/logs/v2", "row without startTime")
	}
	return st, err
}

// rowKey reads a raw row's request_id (as raw JSON, which is all a comparison with
// another row of the same server needs) and startTime.
func rowKey(v []byte) (id []byte, st time.Time, err error) {
	var haveID, haveStart bool
	eachMember(v, func(k, val []byte) bool {
		switch string(k) {
		case "request_id":
			id, haveID = val, true
		case "startTime":
			st, err = parseTime(val)
			haveStart = true
		}
		return err == nil && !(haveID && haveStart)
	})
	if err == nil && (!haveStart || st.IsZero()) {
		err = malformed("/spend/logs/v2", "row without startTime")
	}
	return id, st, err
}

// SpendLogsV2 returns every row of /spend/logs/v2 matching q, newest first, paging
// to the end (also past a capped total) as WalkSpendLogs does. Errors: errdefs.ErrInvalidSpec for a bad query,
// *APIError for LiteLLM's errors, ErrMalformed for undecodable pages,
// errdefs.ErrUnavailable when LiteLLM cannot be reached.
func (c *Client) SpendLogsV2(ctx context.Context, q SpendLogsQuery) ([]SpendLog, error) {
	var out []SpendLog
	var derr error
	err := c.WalkSpendLogs(ctx, q, func(raw RawSpendLog) bool {
		var l SpendLog
		if err := l.decode(raw); err != nil {
			derr = err
			return false
		}
		out = append(out, l)
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return out, fmt.Errorf("litellm: spend logs v2: %w", err)
	}
	return out, nil
}

// SpendLogsByRequestID looks one row up through the legacy /spend/logs endpoint,
// which works on LiteLLM releases without /spend/logs/v2. Errors wrap errdefs.ErrNotFound
// when LiteLLM has no such row (it answers [null]), and otherwise as SpendLogsV2.
func (c *Client) SpendLogsByRequestID(ctx context.Context, requestID string) (*SpendLog, error) {
	const path = "/spend/logs"
	if requestID == "" {
		return nil, errdefs.Invalidf("empty request id")
	}
	var found *SpendLog
	err := c.get(ctx, path, url.Values{"request_id": {requestID}}, func(body []byte) error {
		if !json.Valid(body) {
			return malformed(path, "invalid JSON")
		}
		b := body[jsonscan.Space(body, 0):]
		var derr error
		visit := func(v []byte) bool {
			if isNull(v) || len(v) == 0 || v[0] != '{' {
				return true
			}
			var l SpendLog
			if derr = l.decode(v); derr != nil {
				return false
			}
			if l.RequestID == requestID {
				found = &l
				return false
			}
			return true
		}
		switch {
		case len(b) > 0 && b[0] == '[':
			eachElem(b, visit)
		case len(b) > 0 && b[0] == '{':
			visit(b)
		default:
			return malformed(path, "neither an array nor an object")
		}
		return derr
	})
	if err != nil {
		return nil, fmt.Errorf("litellm: spend log %s: %w", requestID, err)
	}
	if found == nil {
		return nil, fmt.Errorf("litellm: spend log %s: %w", requestID, errdefs.ErrNotFound)
	}
	return found, nil
}
