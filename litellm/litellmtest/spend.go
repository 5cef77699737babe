package litellmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SpendCountCap is LiteLLM's SPEND_LOGS_PAGINATION_COUNT_CAP: /spend/logs/v2 reports
// at most this many rows in "total" and sets "total_is_capped" beyond it; the legacy
// /spend/logs returns at most this many rows.
const SpendCountCap = 10000

// MaxPageSize is the largest page_size /spend/logs/v2 accepts.
const MaxPageSize = 1000

// SpendRow is one row of LiteLLM's spend log (LiteLLM_SpendLogs), as the fake stores
// and serves it.
type SpendRow struct {
	// RequestID is the response body's id ("chatcmpl-...").
	RequestID string
	// LitellmCallID is the x-litellm-call-id response header.
	LitellmCallID string
	CallType      string
	// APIKey is the hex SHA-256 of the key used (HashKey).
	APIKey            string
	Spend             float64
	PromptTokens      int
	CompletionTokens  int
	TotalTokens       int
	StartTime         time.Time
	EndTime           time.Time
	Model             string
	ModelID           string
	ModelGroup        string
	CustomLLMProvider string
	User              string
	EndUser           string
	TeamID            string
	SessionID         string
	// Status is "success" or "failure".
	Status string
	// Metadata holds spend_logs_metadata and LiteLLM's user_api_key_* entries.
	Metadata map[string]any
	// VisibleAt is when the batch writer makes the row readable; zero means at once.
	VisibleAt time.Time
}

type storedRow struct {
	SpendRow
	json []byte
}

type customer struct{ spend float64 }

// rowStore keeps rows sorted newest first (startTime desc, request_id desc), the
// order of LiteLLM's spend-log queries.
type rowStore struct {
	rows      []*storedRow
	customers map[string]*customer
	// beforePage runs before each /spend/logs/v2 answer (BeforeSpendLogsPage).
	beforePage func(url.Values)
}

// BeforeSpendLogsPage sets fn to run before each /spend/logs/v2 request is
// answered, with the request's query; nil removes it. fn runs without the server's
// lock, so it may add rows (AddSpendRows): tests use it to write rows between the
// pages of a walk, as a busy proxy does.
func (s *Server) BeforeSpendLogsPage(fn func(query url.Values)) {
	s.mu.Lock()
	s.store.beforePage = fn
	s.mu.Unlock()
}

func newer(a, b *storedRow) bool {
	if !a.StartTime.Equal(b.StartTime) {
		return a.StartTime.After(b.StartTime)
	}
	return a.RequestID > b.RequestID
}

// pyISO formats t like Python's datetime.isoformat for an aware UTC time (fraction
// only when non-zero), or with "Z" when zulu.
func pyISO(t time.Time, zulu bool) string {
	t = t.UTC()
	s := t.Format("2006-01-02T15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	if zulu {
		return s + "Z"
	}
	return s + "+00:00"
}

type wireRow struct {
	RequestID           string         `json:"request_id"`
	CallType            string         `json:"call_type"`
	APIKey              string         `json:"api_key"`
	Spend               float64        `json:"spend"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	StartTime           string         `json:"startTime"`
	EndTime             string         `json:"endTime"`
	CompletionStartTime string         `json:"completionStartTime"`
	Model               string         `json:"model"`
	ModelID             string         `json:"model_id"`
	ModelGroup          string         `json:"model_group"`
	CustomLLMProvider   string         `json:"custom_llm_provider"`
	APIBase             string         `json:"api_base"`
	User                string         `json:"user"`
	Metadata            map[string]any `json:"metadata"`
	CacheHit            string         `json:"cache_hit"`
	CacheKey            string         `json:"cache_key"`
	RequestTags         []string       `json:"request_tags"`
	TeamID              *string        `json:"team_id"`
	OrganizationID      *string        `json:"organization_id"`
	EndUser             string         `json:"end_user"`
	RequesterIPAddress  string         `json:"requester_ip_address"`
	SessionID           string         `json:"session_id"`
	Status              string         `json:"status"`
	LitellmCallID       string         `json:"litellm_call_id"`
	MCPToolName         *string        `json:"mcp_namespaced_tool_name"`
	RequestDurationMS   int64          `json:"request_duration_ms"`
}

func (s *Server) encodeRow(r SpendRow) *storedRow {
	w := wireRow{
		RequestID: r.RequestID, CallType: r.CallType, APIKey: r.APIKey, Spend: r.Spend,
		TotalTokens: r.TotalTokens, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		StartTime: pyISO(r.StartTime, s.cfg.zulu), EndTime: pyISO(r.EndTime, s.cfg.zulu),
		CompletionStartTime: pyISO(r.EndTime, s.cfg.zulu),
		Model:               r.Model, ModelID: r.ModelID, ModelGroup: r.ModelGroup, CustomLLMProvider: r.CustomLLMProvider,
		User: r.User, Metadata: r.Metadata, CacheHit: "False", RequestTags: []string{},
		EndUser: r.EndUser, RequesterIPAddress: "127.0.0.1", SessionID: r.SessionID, Status: r.Status,
		LitellmCallID: r.LitellmCallID, RequestDurationMS: r.EndTime.Sub(r.StartTime).Milliseconds(),
	}
	if w.Metadata == nil {
		w.Metadata = map[string]any{}
	}
	if r.TeamID != "" {
		w.TeamID = &r.TeamID
	}
	b, err := json.Marshal(w)
	if err != nil {
		// Only a metadata value JSON cannot hold gets here; keep the row readable.
		w.Metadata = map[string]any{"marshal_error": err.Error()}
		b, _ = json.Marshal(w)
	}
	return &storedRow{SpendRow: r, json: b}
}

// AddSpendRows stores rows as if LiteLLM had written them; a row with a zero
// VisibleAt is readable at once.
func (s *Server) AddSpendRows(rows ...SpendRow) {
	enc := make([]*storedRow, len(rows))
	for i, r := range rows {
		enc[i] = s.encodeRow(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store.rows = append(s.store.rows, enc...)
	sort.SliceStable(s.store.rows, func(i, j int) bool { return newer(s.store.rows[i], s.store.rows[j]) })
}

// insertRow adds one row in order; the caller holds s.mu.
func (s *Server) insertRow(r *storedRow) {
	rows := s.store.rows
	i := sort.Search(len(rows), func(i int) bool { return !newer(rows[i], r) })
	rows = append(rows, nil)
	copy(rows[i+1:], rows[i:])
	rows[i] = r
	s.store.rows = rows
}

// SpendRows returns every stored row, visible or not, newest first.
func (s *Server) SpendRows() []SpendRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SpendRow, len(s.store.rows))
	for i, r := range s.store.rows {
		out[i] = r.SpendRow
	}
	return out
}

// Synthesize preloads n synthetic, immediately visible spend rows for load tests:
// row i starts at start+i*step, belongs to endUsers[i%len(endUsers)] (or
// "synthetic-user"), run "synthetic-run-<i/10>", and has request_id
// "chatcmpl-synth-<i>".
func (s *Server) Synthesize(n int, start time.Time, step time.Duration, endUsers ...string) {
	if len(endUsers) == 0 {
		endUsers = []string{"synthetic-user"}
	}
	m := s.sortedModels()[0]
	key := HashKey(s.cfg.masterKey)
	rows := make([]SpendRow, n)
	for i := range rows {
		st := start.Add(time.Duration(i) * step)
		p, c := 50+i%200, 10+i%90
		rows[i] = SpendRow{
			RequestID: fmt.Sprintf("chatcmpl-synth-%07d", i), LitellmCallID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			CallType: "acompletion", APIKey: key, PromptTokens: p, CompletionTokens: c, TotalTokens: p + c,
			Spend: cost(m, p, c), StartTime: st, EndTime: st.Add(400 * time.Millisecond),
			Model: m.Upstream, ModelID: m.ID, ModelGroup: m.Name, CustomLLMProvider: m.Provider,
			EndUser: endUsers[i%len(endUsers)], Status: "success",
			Metadata: map[string]any{"spend_logs_metadata": map[string]any{"run_id": fmt.Sprintf("synthetic-run-%d", i/10), "attempt": 0}, "user_api_key": key},
		}
	}
	s.AddSpendRows(rows...)
}

func cost(m Model, prompt, completion int) float64 {
	return float64(prompt)*m.InputCostPerToken + float64(completion)*m.OutputCostPerToken
}

// parseV2Date accepts the two formats /spend/logs/v2 takes, as UTC.
func parseV2Date(v string) (time.Time, bool) {
	for _, layout := range []string{time.DateTime, time.DateOnly} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// intParam reads an integer query parameter with FastAPI's validation (422 on error).
func intParam(w http.ResponseWriter, q url.Values, name string, def, ge, le int) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		writeValidationError(w, "int_parsing", name, "Input should be a valid integer, unable to parse string as an integer", v, nil)
		return 0, false
	}
	if n < ge {
		writeValidationError(w, "greater_than_equal", name, fmt.Sprintf("Input should be greater than or equal to %d", ge), v, map[string]any{"ge": ge})
		return 0, false
	}
	if le > 0 && n > le {
		writeValidationError(w, "less_than_equal", name, fmt.Sprintf("Input should be less than or equal to %d", le), v, map[string]any{"le": le})
		return 0, false
	}
	return n, true
}

type rowFilter struct {
	from, to                                      time.Time
	endUser, requestID, apiKey, model, user, team string
	status                                        string
}

func (f *rowFilter) match(r *storedRow) bool {
	if r.StartTime.Before(f.from) || r.StartTime.After(f.to) {
		return false
	}
	switch {
	case f.endUser != "" && r.EndUser != f.endUser,
		f.requestID != "" && r.RequestID != f.requestID,
		f.apiKey != "" && r.APIKey != f.apiKey,
		f.model != "" && r.Model != f.model,
		f.user != "" && r.User != f.user,
		f.team != "" && r.TeamID != f.team:
		return false
	}
	switch f.status {
	case "":
	case "success": // LiteLLM counts rows written before the status column as successes
		if r.Status != "success" && r.Status != "" {
			return false
		}
	default:
		if r.Status != f.status {
			return false
		}
	}
	return true
}

// spendLogsV2 follows LiteLLM's ui_view_spend_logs (served as /spend/logs/v2):
// start_date and end_date are required and bound startTime inclusively (gte, lte);
// rows come ordered by startTime descending (request_id descending breaks ties in
// current releases) and are paged by offset, skip = (page-1)*page_size, so rows
// written between two requests shift the later pages. Releases whose handler has no
// end_user parameter ignore that filter silently, as FastAPI drops unknown query
// parameters: IgnoreEndUserFilter reproduces them.
func (s *Server) spendLogsV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	before := s.store.beforePage
	s.mu.Unlock()
	if before != nil {
		before(q)
	}
	page, ok := intParam(w, q, "page", 1, 1, 0)
	if !ok {
		return
	}
	size, ok := intParam(w, q, "page_size", 50, 1, MaxPageSize)
	if !ok {
		return
	}
	sd, ed := q.Get("start_date"), q.Get("end_date")
	if sd == "" || ed == "" {
		writeProxyError(w, http.StatusBadRequest, "Start date and end date are required", "bad_request", "None")
		return
	}
	from, ok1 := parseV2Date(sd)
	to, ok2 := parseV2Date(ed)
	if !ok1 || !ok2 {
		writeProxyError(w, http.StatusBadRequest, "Invalid date format. Use YYYY-MM-DD or YYYY-MM-DD HH:MM:SS", "bad_request", "None")
		return
	}
	f := rowFilter{from: from, to: to, endUser: q.Get("end_user"), requestID: q.Get("request_id"), apiKey: q.Get("api_key"),
		model: q.Get("model"), user: q.Get("user_id"), team: q.Get("team_id"), status: q.Get("status_filter")}
	now := s.now()

	s.mu.Lock()
	if s.ignoreEU {
		f.endUser = ""
	}
	offset := (page - 1) * size
	var matched int
	var data [][]byte
	for _, row := range s.store.rows {
		if row.VisibleAt.After(now) || !f.match(row) {
			continue
		}
		if matched >= offset && len(data) < size {
			data = append(data, row.json)
		}
		matched++
		// The count stops past the cap; the page itself is never truncated.
		if matched > SpendCountCap && matched >= offset+size {
			break
		}
	}
	total, capped := matched, false
	if matched > SpendCountCap {
		total, capped = SpendCountCap, true
	}
	var b bytes.Buffer
	b.Grow(64 + len(data)*(len(s.firstRowJSON())+16))
	b.WriteString(`{"data":[`)
	for i, d := range data {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(d)
	}
	s.mu.Unlock()
	fmt.Fprintf(&b, `],"total":%d,"page":%d,"page_size":%d,"total_pages":%d,"total_is_capped":%t}`,
		total, page, size, (total+size-1)/size, capped)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.Bytes())
}

// firstRowJSON sizes response buffers; the caller holds s.mu.
func (s *Server) firstRowJSON() []byte {
	if len(s.store.rows) == 0 {
		return nil
	}
	return s.store.rows[0].json
}

// parseBool reads a FastAPI bool query parameter.
func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "1", "true", "t", "yes", "y", "on":
		return true, true
	case "0", "false", "f", "no", "n", "off":
		return false, true
	}
	return false, false
}

// spendLogsLegacy follows view_spend_logs: with both dates (YYYY-MM-DD) it filters
// startTime between the two midnights on api_key, else request_id, else user_id, and
// returns daily aggregates unless summarize=false; without dates it looks up by
// api_key (hashed when it starts with "sk-"), request_id (a one-element array, [null]
// when absent), user_id, or returns everything. Lists stop at SpendCountCap rows,
// flagged by x-litellm-spend-logs-truncated.
func (s *Server) spendLogsLegacy(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	summarize := true
	if v := q.Get("summarize"); v != "" {
		b, ok := parseBool(v)
		if !ok {
			writeValidationError(w, "bool_parsing", "summarize", "Input should be a valid boolean, unable to interpret input", v, nil)
			return
		}
		summarize = b
	}
	apiKey, requestID, userID := q.Get("api_key"), q.Get("request_id"), q.Get("user_id")
	sd, ed := q.Get("start_date"), q.Get("end_date")
	now := s.now()

	s.mu.Lock()
	defer s.mu.Unlock()
	visible := func(fn func(*storedRow) bool) (out []*storedRow) {
		for _, row := range s.store.rows {
			if !row.VisibleAt.After(now) && fn(row) {
				out = append(out, row)
			}
		}
		return out
	}

	if sd != "" && ed != "" {
		from, err1 := time.ParseInLocation(time.DateOnly, sd, time.UTC)
		to, err2 := time.ParseInLocation(time.DateOnly, ed, time.UTC)
		if err1 != nil || err2 != nil {
			bad := sd
			if err1 == nil {
				bad = ed
			}
			writeProxyError(w, http.StatusInternalServerError,
				fmt.Sprintf("/spend/logs Errortime data '%s' does not match format '%%Y-%%m-%%d'", bad), "internal_error", "None")
			return
		}
		f := rowFilter{from: from, to: to}
		switch {
		case apiKey != "":
			f.apiKey = apiKey
		case requestID != "":
			f.requestID = requestID
		case userID != "":
			f.user = userID
		}
		rows := visible(f.match)
		if !summarize {
			writeRows(w, rows)
			return
		}
		writeDaily(w, rows, to)
		return
	}

	switch {
	case apiKey != "":
		if strings.HasPrefix(apiKey, "sk-") {
			apiKey = HashKey(apiKey)
		}
		writeRows(w, visible(func(r *storedRow) bool { return r.APIKey == apiKey }))
	case requestID != "":
		rows := visible(func(r *storedRow) bool { return r.RequestID == requestID })
		w.Header().Set("Content-Type", "application/json")
		if len(rows) == 0 {
			_, _ = w.Write([]byte(`[null]`))
			return
		}
		_, _ = w.Write(append(append([]byte{'['}, rows[0].json...), ']'))
	case userID != "":
		writeRows(w, visible(func(r *storedRow) bool { return r.User == userID }))
	default:
		writeRows(w, visible(func(*storedRow) bool { return true }))
	}
}

func writeRows(w http.ResponseWriter, rows []*storedRow) {
	if len(rows) > SpendCountCap {
		rows = rows[:SpendCountCap]
		w.Header().Set("x-litellm-spend-logs-truncated", "true")
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r.json)
	}
	b.WriteByte(']')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(b.String()))
}

// writeDaily aggregates rows per UTC day the way view_spend_logs does with
// summarize=true: per day the total "spend", the spend under each api key, and
// "users" and "models" maps; days after the last one up to end are filled with zeros.
func writeDaily(w http.ResponseWriter, rows []*storedRow, end time.Time) {
	type day = map[string]any
	byDay := map[string]day{}
	var days []string
	for _, r := range rows {
		d := r.StartTime.UTC().Format(time.DateOnly)
		agg, ok := byDay[d]
		if !ok {
			agg = day{"users": map[string]float64{}, "models": map[string]float64{}, "spend": 0.0}
			byDay[d] = agg
			days = append(days, d)
		}
		agg["spend"] = agg["spend"].(float64) + r.Spend
		prev, _ := agg[r.APIKey].(float64)
		agg[r.APIKey] = prev + r.Spend
		agg["users"].(map[string]float64)[r.User] += r.Spend
		agg["models"].(map[string]float64)[r.Model] += r.Spend
	}
	if len(rows) == 0 {
		writeJSON(w, http.StatusOK, []any{})
		return
	}
	sort.Strings(days)
	out := make([]any, 0, len(days))
	for _, d := range days {
		agg := byDay[d]
		agg["startTime"] = d
		out = append(out, agg)
	}
	last, _ := time.Parse(time.DateOnly, days[len(days)-1])
	for cur := last.AddDate(0, 0, 1); !cur.After(end); cur = cur.AddDate(0, 0, 1) {
		out = append(out, day{"startTime": cur.Format(time.DateOnly), "spend": 0, "users": map[string]float64{}, "models": map[string]float64{}})
	}
	writeJSON(w, http.StatusOK, out)
}

// writeSpend records a finished call's row (caller does not hold s.mu).
func (s *Server) writeSpend(r SpendRow) {
	r.VisibleAt = r.EndTime.Add(s.cfg.batchDelay)
	row := s.encodeRow(r)
	s.mu.Lock()
	s.insertRow(row)
	if k := s.keys[r.APIKey]; k != nil {
		k.spend += r.Spend
	}
	if r.EndUser != "" {
		if s.store.customers == nil {
			s.store.customers = map[string]*customer{}
		}
		c := s.store.customers[r.EndUser]
		if c == nil {
			c = &customer{}
			s.store.customers[r.EndUser] = c
		}
		c.spend += r.Spend
	}
	s.mu.Unlock()
}

// roundCost keeps the float stable in headers and rows.
func roundCost(v float64) float64 { return math.Round(v*1e12) / 1e12 }
