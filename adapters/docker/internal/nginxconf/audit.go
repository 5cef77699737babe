package nginxconf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/internal/inert"
	"github.com/agentsandbox/sandbox/port"
)

// ErrMalformedAudit reports an audit log line that is not a record the rendered nginx
// configuration writes. Errors from ReadAudit match it with errors.Is.
var ErrMalformedAudit = errors.New("malformed audit log line")

// MaxAuditLineBytes bounds one audit log line. nginx's lines are far shorter: the only
// client-controlled field, the path, is bounded by nginx's header buffers.
const MaxAuditLineBytes = 64 << 10

// AuditLineError reports one malformed line of an audit log. It unwraps to
// ErrMalformedAudit and to the cause (a *json.SyntaxError, say).
type AuditLineError struct {
	// Line is the 1-based line number.
	Line int
	// Err says what is wrong with it.
	Err error
}

// Error implements error.
func (e *AuditLineError) Error() string {
	return fmt.Sprintf("nginxconf: audit log line %d: %v", e.Line, e.Err)
}

// Unwrap returns ErrMalformedAudit and the cause.
func (e *AuditLineError) Unwrap() []error { return []error{ErrMalformedAudit, e.Err} }

// auditLine is one line as the llmproxy_audit log_format writes it: every value a
// string, "" or "-" when nginx had none.
type auditLine struct {
	Time                 string `json:"time"`
	Msec                 string `json:"msec"`
	RunID                string `json:"run_id"`
	Attempt              string `json:"attempt"`
	Method               string `json:"method"`
	Path                 string `json:"path"`
	Status               string `json:"status"`
	RequestLength        string `json:"request_length"`
	BytesSent            string `json:"bytes_sent"`
	BodyBytesSent        string `json:"body_bytes_sent"`
	RequestTime          string `json:"request_time"`
	UpstreamStatus       string `json:"upstream_status"`
	UpstreamConnectTime  string `json:"upstream_connect_time"`
	UpstreamHeaderTime   string `json:"upstream_header_time"`
	UpstreamResponseTime string `json:"upstream_response_time"`
	CallID               string `json:"call_id"`
	ResponseCost         string `json:"response_cost"`
	ModelID              string `json:"model_id"`
	ModelGroup           string `json:"model_group"`
	ContentType          string `json:"content_type"`
	Blocked              string `json:"blocked"`
	Error                string `json:"error"`
}

// Defaults of AuditLimits.
const (
	// DefaultMaxRecords bounds the forwarded calls an Audit keeps: far more than any
	// real run makes (a runaway agent once made about twenty), few enough to hold.
	DefaultMaxRecords = 50_000
	// DefaultMaxRefused bounds the refused requests an Audit keeps as records.
	DefaultMaxRefused = 1_000
	// maxLineErrors bounds the malformed lines reported one by one.
	maxLineErrors = 16
)

// AuditLimits bound what ReadAudit keeps, so that a flooded log costs bounded memory.
// Zero fields take the defaults.
type AuditLimits struct {
	// MaxRecords bounds the records of forwarded calls (default DefaultMaxRecords).
	MaxRecords int
	// MaxRefused bounds the records of refused requests (default DefaultMaxRefused).
	MaxRefused int
}

// Audit is what ReadAudit kept of an audit log.
type Audit struct {
	// Records are the kept records, in log order.
	Records []port.AuditRecord
	// Refused counts every refused request in the log: the ones kept in Records, the
	// ones over MaxRefused, and the ones nginx only tallied.
	Refused int
	// Dropped counts the forwarded calls over MaxRecords: billable calls the Audit has
	// no record of.
	Dropped int
}

// ReadAudit reads the JSON-lines audit log a RenderNginx configuration writes. It
// streams: memory is bounded by lim and MaxAuditLineBytes, however long the log.
//
// The configuration writes a full line per forwarded call, a full line per refused
// request early in the run (a sample of what the agent tried), and a short tally line
// for every other refused request. Full lines become records, up to lim; the rest are
// counted in Audit.Refused and Audit.Dropped.
//
// Record fields map as follows: Time is the request's start (nginx logs at the end, so
// the logged time minus request_time), Latency is request_time, TTFB the upstream's
// header time, ReqBytes the whole request (request line, headers and body, as nginx
// counts it), RespBytes the response body, Model LiteLLM's x-litellm-model-group and
// Streamed whether the upstream answered text/event-stream. Error is set when nginx
// could not get an answer from the upstream (HTTP 502 or 504 from nginx itself) or the
// client went away first (nginx's 499); a stream the upstream cut short after its
// headers cannot be told apart in nginx's log. nginx's "-" means empty. Timings have
// millisecond resolution, and RespBytes of a chunked response includes the chunk
// framing.
//
// A last line without its newline is a write cut short (nginx was killed mid-line); it
// is kept if it parses and dropped silently if not. Any other malformed line is skipped
// and reported: the Audit of every good line is returned together with an error
// joining one *AuditLineError per bad line (the first few, then a count), matching
// ErrMalformedAudit, since the calls behind the good lines are still billable. A read
// error is returned with the Audit read before it.
func ReadAudit(r io.Reader, lim AuditLimits) (*Audit, error) {
	if lim.MaxRecords <= 0 {
		lim.MaxRecords = DefaultMaxRecords
	}
	if lim.MaxRefused <= 0 {
		lim.MaxRefused = DefaultMaxRefused
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		a        Audit
		calls    int
		kept     int // refused records kept
		errs     []error
		badLines int
	)
	bad := func(n int, err error) {
		if badLines++; badLines <= maxLineErrors {
			errs = append(errs, &AuditLineError{Line: n, Err: err})
		}
	}
	done := func(err error) (*Audit, error) {
		if badLines > maxLineErrors {
			errs = append(errs, fmt.Errorf("%w: %d more malformed lines", ErrMalformedAudit, badLines-maxLineErrors))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("nginxconf: reading audit log: %w", err))
		}
		return &a, errors.Join(errs...)
	}
	for n := 1; ; n++ {
		line, err := readLine(br)
		complete := err == nil
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, errLineTooLong) {
			return done(err)
		}
		if errors.Is(err, errLineTooLong) {
			bad(n, err)
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if isTally(line) {
				a.Refused++
			} else if rec, perr := parseAuditLine(line); perr != nil {
				if complete {
					bad(n, perr)
				}
			} else if rec.Blocked != "" {
				a.Refused++
				if kept < lim.MaxRefused {
					kept++
					a.Records = append(a.Records, rec)
				}
			} else if calls < lim.MaxRecords {
				calls++
				a.Records = append(a.Records, rec)
			} else {
				a.Dropped++
			}
		}
		if !complete {
			return done(nil)
		}
	}
}

// isTally recognises the short line the configuration writes for a refused request it
// does not log in full: {"refused":"<reason>"}. It is matched without JSON decoding:
// a flood is mostly these.
func isTally(line []byte) bool {
	reason, ok := bytes.CutPrefix(line, []byte(`{"refused":"`))
	if !ok {
		return false
	}
	reason, ok = bytes.CutSuffix(reason, []byte(`"}`))
	return ok && len(reason) > 0 && !bytes.ContainsFunc(reason, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' })
}

var errLineTooLong = fmt.Errorf("line longer than %d bytes", MaxAuditLineBytes)

// readLine returns the next line without its newline; io.EOF marks a last line that
// had none (possibly empty). A line over MaxAuditLineBytes is consumed and reported as
// errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxAuditLineBytes+1 {
			line = nil
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return line, err
		}
	}
}

func parseAuditLine(b []byte) (port.AuditRecord, error) {
	var l auditLine
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&l); err != nil {
		return port.AuditRecord{}, err
	}
	if dec.More() {
		return port.AuditRecord{}, errors.New("trailing data after the JSON object")
	}
	var rec port.AuditRecord
	if l.RunID == "" {
		return rec, errors.New("no run_id")
	}
	var err error
	num := func(field, s string) int64 {
		if err != nil {
			return 0
		}
		var v int64
		v, err = strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			err = fmt.Errorf("%s %q is not a non-negative integer", field, s)
		}
		return v
	}
	rec.RunID = l.RunID
	rec.Attempt = int(num("attempt", l.Attempt))
	rec.Status = int(num("status", l.Status))
	rec.ReqBytes = num("request_length", l.RequestLength)
	rec.RespBytes = num("body_bytes_sent", l.BodyBytesSent)
	if err != nil {
		return rec, err
	}
	if rec.Latency, err = seconds("request_time", l.RequestTime); err != nil {
		return rec, err
	}
	if rec.TTFB, err = seconds("upstream_header_time", last(l.UpstreamHeaderTime)); err != nil {
		return rec, err
	}
	end, err := logTime(l.Msec, l.Time)
	if err != nil {
		return rec, err
	}
	rec.Time = end.Add(-rec.Latency).UTC()
	rec.Method = l.Method
	// nginx logs the decoded path ($uri) and LiteLLM's echo of the agent's model:
	// both are agent-chosen, kept as the Go fronts keep them (inert.String).
	rec.Path = inert.String(l.Path)
	rec.CallID = dash(l.CallID)
	rec.ResponseCost = dash(l.ResponseCost)
	rec.Model = inert.String(dash(l.ModelGroup))
	if mt, _, perr := mime.ParseMediaType(dash(l.ContentType)); perr == nil {
		rec.Streamed = mt == "text/event-stream"
	}
	rec.Blocked = dash(l.Blocked)
	switch dash(l.Error) {
	case "":
	case "upstream_unavailable":
		rec.Error = "upstream: could not be reached or failed before answering (upstream status " + orDash(last(l.UpstreamStatus)) + ")"
	case "upstream_timeout":
		rec.Error = "upstream: timed out before answering"
	case "upstream_informational":
		rec.Error = "upstream: answered with an informational status (1xx); the call was cut (upstream status " + orDash(last(l.UpstreamStatus)) + ")"
	default:
		rec.Error = l.Error
	}
	if rec.Status == 499 && rec.Error == "" {
		// nginx's own code for a client that closed the connection before the response.
		rec.Error = "client went away before the response was complete"
	}
	return rec, nil
}

// dash maps nginx's "no value" to empty.
func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// last returns the last of nginx's per-upstream values ("0.1, 0.2 : 0.3" after retries
// and internal redirects): the attempt that produced the response.
func last(s string) string {
	if i := strings.LastIndexAny(s, ",:"); i >= 0 {
		s = s[i+1:]
	}
	return dash(strings.TrimSpace(s))
}

// seconds parses nginx's "1.234" (seconds with milliseconds).
func seconds(field, s string) (time.Duration, error) {
	s = dash(s)
	if s == "" {
		return 0, nil
	}
	if strings.ContainsAny(s, "+-eE") {
		return 0, fmt.Errorf("%s %q is not a duration in seconds", field, s)
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q is not a duration in seconds", field, s)
	}
	return d, nil
}

// logTime is the moment nginx logged the request: msec ("1700000000.123") when present,
// else the ISO 8601 time (whole seconds).
func logTime(msec, iso string) (time.Time, error) {
	if msec = dash(msec); msec != "" {
		sec, frac, _ := strings.Cut(msec, ".")
		s, err1 := strconv.ParseInt(sec, 10, 64)
		var ns int64
		var err2 error
		if frac != "" {
			if len(frac) > 9 {
				frac = frac[:9]
			}
			ns, err2 = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		}
		if err1 != nil || err2 != nil || s < 0 || ns < 0 {
			return time.Time{}, fmt.Errorf("msec %q is not a Unix time", msec)
		}
		return time.Unix(s, ns), nil
	}
	if iso = dash(iso); iso != "" {
		t, err := time.Parse(time.RFC3339, iso)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q is not ISO 8601: %w", iso, err)
		}
		return t, nil
	}
	return time.Time{}, errors.New("no time")
}
