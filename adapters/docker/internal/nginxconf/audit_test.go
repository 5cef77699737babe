package nginxconf_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/adapters/docker/internal/nginxconf"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Lines as nginx writes them with the llmproxy_audit format (escape=json: a variable
// with no value is written as "", and nginx itself writes "-" for missing upstream
// timings).
const (
	lineCall    = `{"time":"2026-11-22T10:00:01+00:00","msec":"1795341601.250","run_id":"run-1","attempt":"2","method":"POST","path":"/v1/chat/completions","status":"200","request_length":"812","bytes_sent":"402","body_bytes_sent":"59","request_time":"1.500","upstream_status":"200","upstream_connect_time":"0.000","upstream_header_time":"0.120","upstream_response_time":"1.499","call_id":"call-abc","response_cost":"0.00042","model_id":"dep-1","model_group":"gpt-4o","content_type":"text/event-stream; charset=utf-8","blocked":"","error":""}`
	lineBlocked = `{"time":"2026-11-22T10:00:02+00:00","msec":"1795341602.000","run_id":"run-1","attempt":"2","method":"GET","path":"/key/generate","status":"404","request_length":"90","bytes_sent":"250","body_bytes_sent":"103","request_time":"0.000","upstream_status":"","upstream_connect_time":"","upstream_header_time":"","upstream_response_time":"","call_id":"","response_cost":"","model_id":"","model_group":"","content_type":"","blocked":"path_not_allowed","error":""}`
	lineDown    = `{"time":"2026-11-22T10:00:03+00:00","msec":"","run_id":"run-1","attempt":"2","method":"POST","path":"/v1/chat/completions","status":"502","request_length":"100","bytes_sent":"300","body_bytes_sent":"112","request_time":"0.003","upstream_status":"502, 502","upstream_connect_time":"-, -","upstream_header_time":"-, -","upstream_response_time":"0.001, 0.002","call_id":"","response_cost":"","model_id":"","model_group":"","content_type":"","blocked":"","error":"upstream_unavailable"}`
)

// parse reads a log with the default limits, which none of these logs reaches.
func parse(r io.Reader) ([]port.AuditRecord, error) {
	a, err := nginxconf.ReadAudit(r, nginxconf.AuditLimits{})
	return a.Records, err
}

func TestParseAuditLog(t *testing.T) {
	recs, err := parse(strings.NewReader(lineCall + "\n" + lineBlocked + "\n\n" + lineDown + "\n"))
	require.NoError(t, err)
	assert.Equal(t, []port.AuditRecord{
		{
			Time: time.Unix(1795341601, 250e6).Add(-1500 * time.Millisecond).UTC(), RunID: "run-1", Attempt: 2,
			Method: "POST", Path: "/v1/chat/completions", Status: 200, ReqBytes: 812, RespBytes: 59,
			Model: "gpt-4o", Streamed: true, CallID: "call-abc", ResponseCost: "0.00042",
			Latency: 1500 * time.Millisecond, TTFB: 120 * time.Millisecond,
		},
		{
			Time: time.Unix(1795341602, 0).UTC(), RunID: "run-1", Attempt: 2, Method: "GET", Path: "/key/generate",
			Status: 404, ReqBytes: 90, RespBytes: 103, Blocked: "path_not_allowed",
		},
		{
			// No msec: the ISO time (whole seconds) is used.
			Time: time.Date(2026, 11, 22, 10, 0, 3, 0, time.UTC).Add(-3 * time.Millisecond), RunID: "run-1", Attempt: 2,
			Method: "POST", Path: "/v1/chat/completions", Status: 502, ReqBytes: 100, RespBytes: 112,
			Latency: 3 * time.Millisecond,
			Error:   "upstream: could not be reached or failed before answering (upstream status 502)",
		},
	}, recs)
}

func TestParseAuditLogClientGone(t *testing.T) {
	line := strings.Replace(lineCall, `"status":"200"`, `"status":"499"`, 1)
	recs, err := parse(strings.NewReader(line + "\n"))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, 499, recs[0].Status)
	assert.Equal(t, "client went away before the response was complete", recs[0].Error)
	assert.Equal(t, "call-abc", recs[0].CallID, "the call still happened upstream")
}

func TestParseAuditLogTruncatedLastLine(t *testing.T) {
	// nginx killed mid-write: the partial last line is dropped without an error.
	recs, err := parse(strings.NewReader(lineCall + "\n" + lineBlocked[:57]))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, "call-abc", recs[0].CallID)

	// A last line complete but for its newline is kept.
	recs, err = parse(strings.NewReader(lineCall + "\n" + lineBlocked))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "path_not_allowed", recs[1].Blocked)
}

func TestParseAuditLogMalformed(t *testing.T) {
	badStatus := strings.Replace(lineBlocked, `"status":"404"`, `"status":"4x4"`, 1)
	noRun := strings.Replace(lineBlocked, `"run_id":"run-1"`, `"run_id":""`, 1)
	badTime := strings.Replace(lineDown, `"time":"2026-11-22T10:00:03+00:00"`, `"time":"yesterday"`, 1)
	badDur := strings.Replace(lineCall, `"request_time":"1.500"`, `"request_time":"-1"`, 1)
	in := strings.Join([]string{lineCall, `{"time":`, badStatus, noRun, "not json", badTime, badDur, lineBlocked + " {}", lineDown}, "\n") + "\n"

	recs, err := parse(strings.NewReader(in))
	require.Error(t, err)
	assert.ErrorIs(t, err, nginxconf.ErrMalformedAudit)
	// The good lines' records come back with the error: those calls are billable.
	require.Len(t, recs, 2)
	assert.Equal(t, "call-abc", recs[0].CallID)
	assert.Equal(t, 502, recs[1].Status)

	var lines []int
	var causes []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var le *nginxconf.AuditLineError
		require.ErrorAs(t, e, &le)
		lines = append(lines, le.Line)
		causes = append(causes, le.Err.Error())
		assert.Contains(t, le.Error(), fmt.Sprintf("audit log line %d: ", le.Line))
	}
	assert.Equal(t, []int{2, 3, 4, 5, 6, 7, 8}, lines)
	assert.Equal(t, "unexpected EOF", causes[0])
	assert.Equal(t, `status "4x4" is not a non-negative integer`, causes[1])
	assert.Equal(t, "no run_id", causes[2])
	assert.Contains(t, causes[4], `time "yesterday" is not ISO 8601`)
	assert.Equal(t, `request_time "-1" is not a duration in seconds`, causes[5])
	assert.Equal(t, "trailing data after the JSON object", causes[6])
	var syn *json.SyntaxError
	assert.ErrorAs(t, err, &syn, "the JSON cause is reachable")
}

func TestParseAuditLogLongLine(t *testing.T) {
	long := `{"path":"` + strings.Repeat("a", nginxconf.MaxAuditLineBytes) + `"}`
	recs, err := parse(strings.NewReader(lineCall + "\n" + long + "\n" + lineBlocked + "\n"))
	var le *nginxconf.AuditLineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 2, le.Line)
	assert.ErrorContains(t, err, "longer than")
	require.Len(t, recs, 2, "parsing resumes after the long line")
	assert.Equal(t, "path_not_allowed", recs[1].Blocked)
}

func TestParseAuditLogEmptyAndReadError(t *testing.T) {
	recs, err := parse(strings.NewReader(""))
	require.NoError(t, err)
	assert.Empty(t, recs)

	boom := errors.New("disk gone")
	recs, err = parse(io.MultiReader(strings.NewReader(lineCall+"\n"), iotest.ErrReader(boom)))
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, nginxconf.ErrMalformedAudit)
	require.Len(t, recs, 1, "records read before the failure are kept")
}

// TestParseAuditLogSmallReads checks lines split across many reads.
func TestParseAuditLogSmallReads(t *testing.T) {
	in := lineCall + "\n" + lineBlocked + "\n"
	recs, err := parse(bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(in)), 16))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "call-abc", recs[0].CallID)

	// A line longer than the reader's buffer but under the limit.
	path := "/" + strings.Repeat("p", 10000)
	big := strings.Replace(lineBlocked, `"path":"/key/generate"`, `"path":"`+path+`"`, 1)
	recs, err = parse(strings.NewReader(big + "\n" + lineCall + "\n"))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, path, recs[0].Path)
	assert.Equal(t, "call-abc", recs[1].CallID)
}

func ExampleReadAudit() {
	log := bytes.NewBufferString(lineCall + "\n" + lineBlocked + "\n" + `{"refused":"path_not_allowed"}` + "\n")
	a, err := nginxconf.ReadAudit(log, nginxconf.AuditLimits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range a.Records {
		fmt.Printf("%s %s -> %d call=%q cost=%q streamed=%v blocked=%q\n", r.Method, r.Path, r.Status, r.CallID, r.ResponseCost, r.Streamed, r.Blocked)
	}
	fmt.Printf("%d refused, %d dropped\n", a.Refused, a.Dropped)
	// Output:
	// POST /v1/chat/completions -> 200 call="call-abc" cost="0.00042" streamed=true blocked=""
	// GET /key/generate -> 404 call="" cost="" streamed=false blocked="path_not_allowed"
	// 2 refused, 0 dropped
}

func ExampleRenderNginx() {
	policy, err := proxypolicy.NewPolicy(port.ProxySpec{
		RunID: "run-1", Attempt: 0, APIKey: "sk-example",
		Attribution: port.Attribution{BillingAccountID: "acct-$1", GraphID: "sandbox:agent"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	conf, err := nginxconf.RenderNginx(nginxconf.NginxConfig{Policy: policy, Upstream: "http://litellm:4000"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Run it with: nginx <nginxconf.NginxArgs(path)...>
	for _, line := range strings.Split(string(conf), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "listen ") || strings.HasPrefix(line, "proxy_set_header X-Litellm") || strings.HasPrefix(line, "proxy_pass_request_headers") {
			fmt.Println(line)
		}
	}
	// Output:
	// proxy_pass_request_headers off;
	// proxy_set_header X-Litellm-End-User-Id "acct-${llmproxy_dollar}1";
	// proxy_set_header X-Litellm-Spend-Logs-Metadata "{\"run_id\":\"run-1\",\"attempt\":0,\"graph_id\":\"sandbox:agent\"}";
	// listen "unix:/llm-sock/llm.sock";
}

func TestReadAuditLimits(t *testing.T) {
	call := func(i int) string {
		return strings.Replace(lineCall, `"call_id":"call-abc"`, fmt.Sprintf(`"call_id":"call-%d"`, i), 1)
	}
	tally := `{"refused":"path_not_allowed"}`
	in := strings.Join([]string{
		call(1), lineBlocked, tally, call(2), lineBlocked, lineBlocked, call(3), tally, call(4), lineBlocked, call(5), tally,
	}, "\n") + "\n"
	a, err := nginxconf.ReadAudit(strings.NewReader(in), nginxconf.AuditLimits{MaxRecords: 3, MaxRefused: 2})
	require.NoError(t, err)
	var got []string
	for _, r := range a.Records {
		got = append(got, r.CallID+r.Blocked)
	}
	assert.Equal(t, []string{"call-1", "path_not_allowed", "call-2", "path_not_allowed", "call-3"}, got, "the first records of each kind, in log order")
	assert.Equal(t, 7, a.Refused, "every refused request is counted, kept or not")
	assert.Equal(t, 2, a.Dropped, "forwarded calls over the limit are counted")

	// A tally line is recognised exactly; anything else is a malformed line.
	for _, bad := range []string{`{"refused":""}`, `{"refused":"Path"}`, `{"refused":"a"} `, `{"refused":"a\"}`} {
		a, err := nginxconf.ReadAudit(strings.NewReader(bad+"\n"), nginxconf.AuditLimits{})
		assert.ErrorIs(t, err, nginxconf.ErrMalformedAudit, bad)
		assert.Zero(t, a.Refused, bad)
	}
}

// Malformed lines are reported one by one up to a small number, then counted.
func TestReadAuditMalformedBounded(t *testing.T) {
	in := strings.Repeat("not json\n", 10_000) + lineCall + "\n"
	a, err := nginxconf.ReadAudit(strings.NewReader(in), nginxconf.AuditLimits{})
	require.ErrorIs(t, err, nginxconf.ErrMalformedAudit)
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	assert.Len(t, errs, 17, "16 lines reported, then one count")
	assert.ErrorContains(t, errs[16], "9984 more malformed lines")
	require.Len(t, a.Records, 1)
}

// hugeLog streams n full call lines, each followed by two tally lines, without holding
// them: the reader under test is the only thing that could keep them.
type hugeLog struct {
	n, i int
	buf  []byte
}

func (h *hugeLog) Read(p []byte) (int, error) {
	for len(h.buf) == 0 {
		if h.i == h.n {
			return 0, io.EOF
		}
		h.i++
		line := strings.Replace(lineCall, `"call_id":"call-abc"`, fmt.Sprintf(`"call_id":"call-%d"`, h.i), 1)
		h.buf = []byte(line + "\n" + `{"refused":"path_not_allowed"}` + "\n" + `{"refused":"method_not_allowed"}` + "\n")
	}
	n := copy(p, h.buf)
	h.buf = h.buf[n:]
	return n, nil
}

// A log far larger than the limits costs memory for the limits only.
func TestReadAuditHugeLogBoundedMemory(t *testing.T) {
	const calls = 12_000 // about 8 MB of log
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a, err := nginxconf.ReadAudit(&hugeLog{n: calls}, nginxconf.AuditLimits{MaxRecords: 1000})
	require.NoError(t, err)
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Len(t, a.Records, 1000)
	assert.Equal(t, "call-1000", a.Records[999].CallID)
	assert.Equal(t, calls-1000, a.Dropped)
	assert.Equal(t, 2*calls, a.Refused)
	// Keeping every record would hold over 4 MB; the kept thousand hold under 0.5.
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	assert.Less(t, grown, int64(3<<19), "heap grew by %d bytes", grown)
	runtime.KeepAlive(a)
}
