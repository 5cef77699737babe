package llmproxy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// jsonFields scans one JSON object incrementally, as bytes pass through the proxy, and
// keeps the raw text of the values of a few top-level keys. It never holds more than
// limit bytes per kept value, so a request whose "messages" run to megabytes before its
// "model" costs nothing extra (OpenAI's Python SDK sends "messages" first).
//
// It is not a validator: on input that is not an object it stops and keeps what it has.
// Duplicate keys keep the last value, as Python's json (LiteLLM) does.
type jsonFields struct {
	want  []string
	limit int
	got   map[string][]byte

	depth   int
	state   scanState
	inStr   bool
	esc     bool
	key     []byte
	keyOver bool
	keep    bool // capturing the current top-level value
	val     []byte
	valOver bool
	stopped bool
}

type scanState uint8

const (
	stKey     scanState = iota // in the top-level object, expecting a key or '}'
	stColon                    // after a key
	stValue                    // after ':'
	stInValue                  // inside (or just after) a top-level value
)

const maxKeyLen = 64

func newJSONFields(limit int, want ...string) *jsonFields {
	return &jsonFields{want: want, limit: limit, got: make(map[string][]byte, len(want))}
}

// reset prepares the scanner for the next object (the next SSE event), reusing buffers.
func (s *jsonFields) reset() {
	clear(s.got)
	s.depth, s.state, s.inStr, s.esc = 0, stKey, false, false
	s.key, s.keyOver, s.keep, s.val, s.valOver, s.stopped = s.key[:0], false, false, s.val[:0], false, false
}

// Write feeds the next bytes of the object. It never fails.
func (s *jsonFields) Write(p []byte) {
	for _, c := range p {
		if s.stopped {
			return
		}
		s.step(c)
	}
}

func (s *jsonFields) writeByte(c byte) {
	if !s.stopped {
		s.step(c)
	}
}

// strByte follows c inside a string: an escape, or the closing quote (it reports
// that the string ended).
func (s *jsonFields) strByte(c byte) (closed bool) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc = true
	case c == '"':
		s.inStr = false
		return true
	}
	return false
}

func (s *jsonFields) step(c byte) {
	if s.inStr {
		if s.depth == 1 && s.state == stKey {
			// Reading a key: keep its raw bytes, without the closing quote.
			if s.strByte(c) {
				s.state = stColon
				return
			}
			if len(s.key) < maxKeyLen {
				s.key = append(s.key, c)
			} else {
				s.keyOver = true
			}
			return
		}
		s.appendVal(c)
		s.strByte(c)
		return
	}
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		if s.depth > 1 {
			s.appendVal(c)
		}
		return
	}
	switch s.depth {
	case 0:
		if c != '{' {
			s.stopped = true
			return
		}
		s.depth, s.state = 1, stKey
	case 1:
		switch s.state {
		case stKey:
			switch c {
			case '"':
				s.inStr, s.key, s.keyOver = true, s.key[:0], false
			case '}':
				s.depth, s.stopped = 0, true
			default:
				s.stopped = true
			}
		case stColon:
			if c != ':' {
				s.stopped = true
				return
			}
			s.state = stValue
		case stValue:
			s.keep = !s.keyOver && s.wanted(s.key)
			s.val, s.valOver = s.val[:0], false
			s.state = stInValue
			s.valueByte(c)
		case stInValue:
			switch c {
			case ',':
				s.finishValue()
				s.state = stKey
			case '}':
				s.finishValue()
				s.depth, s.stopped = 0, true
			default:
				s.appendVal(c) // a number or literal continues
			}
		}
	default:
		s.valueByte(c)
		if c == '}' || c == ']' {
			s.depth--
		}
	}
}

// valueByte keeps c of a value and follows a string or a nesting it opens.
func (s *jsonFields) valueByte(c byte) {
	s.appendVal(c)
	switch c {
	case '"':
		s.inStr = true
	case '{', '[':
		s.depth++
	}
}

// wanted reports whether key (raw, as between the quotes) is one of the kept keys. A key
// spelled with escapes ("\u006dodel") is decoded first, as the upstream would.
func (s *jsonFields) wanted(key []byte) bool {
	k := string(key)
	if bytes.IndexByte(key, '\\') >= 0 {
		if json.Unmarshal([]byte(`"`+k+`"`), &k) != nil {
			return false
		}
		s.key = append(s.key[:0], k...) // finishValue stores the decoded key
	}
	for _, w := range s.want {
		if k == w {
			return true
		}
	}
	return false
}

func (s *jsonFields) appendVal(c byte) {
	if !s.keep || s.valOver {
		return
	}
	if len(s.val) >= s.limit {
		s.valOver = true
		return
	}
	s.val = append(s.val, c)
}

func (s *jsonFields) finishValue() {
	if s.keep {
		if s.valOver {
			delete(s.got, string(s.key)) // the last duplicate wins, even when too long to keep
		} else {
			s.got[string(s.key)] = append([]byte(nil), s.val...)
		}
	}
	s.keep = false
}

// str returns a kept string value, or "" if key was absent or not a string.
func (s *jsonFields) str(key string) string {
	raw, ok := s.got[key]
	if !ok {
		return ""
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// boolean returns a kept boolean value (false if absent or not a boolean).
func (s *jsonFields) boolean(key string) bool {
	return string(s.got[key]) == "true"
}

// usage is the token usage of OpenAI-style chat/completions (prompt/completion) and
// responses (input/output) APIs.
type usage struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	Total      int64 `json:"total_tokens"`
	// Anthropic counts cached input apart from input_tokens; both are billed.
	CacheCreation int64 `json:"cache_creation_input_tokens"`
	CacheRead     int64 `json:"cache_read_input_tokens"`
}

// tokens returns the total tokens of a kept "usage" object, and whether there was one.
func (s *jsonFields) tokens() (int64, bool) {
	raw, ok := s.got["usage"]
	if !ok || string(raw) == "null" {
		return 0, false
	}
	var u usage
	if json.Unmarshal(raw, &u) != nil {
		return 0, false
	}
	return u.total(), true
}

// total is the call's tokens: total_tokens when given, else the sum of the parts.
//
// A total smaller than its parts is not believed: the larger counts. Negative
// parts count as zero.
func (u usage) total() int64 {
	sum := int64(0)
	for _, n := range []int64{u.Prompt, u.Completion, u.Input, u.Output, u.CacheCreation, u.CacheRead} {
		sum += max(n, 0)
	}
	return max(u.Total, sum)
}

// errorSummary describes a kept "error" object by its type and code only: its message
// may quote the prompt, which the audit never holds.
func (s *jsonFields) errorSummary() string {
	raw, ok := s.got["error"]
	if !ok {
		return ""
	}
	var e struct {
		Type string          `json:"type"`
		Code json.RawMessage `json:"code"`
	}
	_ = json.Unmarshal(raw, &e)
	code := strings.Trim(string(e.Code), `"`)
	return ErrorEvent(e.Type, code)
}

// sseFields runs a jsonFields over the data of each server-sent event in a stream, as
// bytes pass through, and calls onEvent after each event that had data.
type sseFields struct {
	sc        *jsonFields
	onEvent   func(*jsonFields)
	lineStart bool
	prefix    [5]byte
	prefixN   int
	inData    bool
	skipSpace bool
	skipLine  bool
	hasData   bool
}

func newSSEFields(sc *jsonFields, onEvent func(*jsonFields)) *sseFields {
	return &sseFields{sc: sc, onEvent: onEvent, lineStart: true}
}

var dataPrefix = [5]byte{'d', 'a', 't', 'a', ':'}

// Write feeds the next bytes of the stream.
func (e *sseFields) Write(p []byte) {
	for _, c := range p {
		e.step(c)
	}
}

func (e *sseFields) step(c byte) {
	if c == '\r' {
		return // CRLF line ends: the LF does the work
	}
	if c == '\n' {
		if e.lineStart {
			e.dispatch() // a blank line ends the event
		}
		if e.inData {
			e.sc.writeByte('\n') // multi-line data joins with LF, which JSON ignores
		}
		e.lineStart, e.prefixN, e.inData, e.skipSpace, e.skipLine = true, 0, false, false, false
		return
	}
	e.lineStart = false
	switch {
	case e.skipLine:
	case e.inData:
		if e.skipSpace && c == ' ' {
			e.skipSpace = false
			return
		}
		e.skipSpace = false
		e.sc.writeByte(c)
	default:
		e.prefix[e.prefixN] = c
		e.prefixN++
		if e.prefix[e.prefixN-1] != dataPrefix[e.prefixN-1] {
			e.skipLine = true // event:, id:, retry: or a comment
			return
		}
		if e.prefixN == len(dataPrefix) {
			e.inData, e.skipSpace, e.hasData = true, true, true
		}
	}
}

func (e *sseFields) dispatch() {
	if e.hasData {
		e.onEvent(e.sc)
	}
	e.sc.reset()
	e.hasData = false
}

// flush dispatches a final event that was not followed by a blank line.
func (e *sseFields) flush() {
	if e.hasData {
		e.onEvent(e.sc)
	}
	e.sc.reset()
	e.hasData = false
}
