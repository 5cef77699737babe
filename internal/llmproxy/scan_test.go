package llmproxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feed writes s to a fresh scanner in chunks of n bytes, to exercise state across writes.
func feed(s string, n int, want ...string) *jsonFields {
	sc := newJSONFields(scanLimit, want...)
	for len(s) > 0 {
		k := min(n, len(s))
		sc.Write([]byte(s[:k]))
		s = s[k:]
	}
	return sc
}

func TestJSONFieldsFindsTopLevelKeys(t *testing.T) {
	big := strings.Repeat(`{"role":"user","content":"say \"model\": {x} [y], \\ \u00e9"},`, 5000)
	body := `{"messages":[` + big + `{"role":"user","content":"hi"}],"nested":{"model":"inner"},"model":"gpt-4o-mini","stream":true}`
	for _, n := range []int{1, 7, 4096, len(body)} {
		sc := feed(body, n, "model", "stream")
		assert.Equal(t, "gpt-4o-mini", sc.str("model"), "chunk size %d", n)
		assert.True(t, sc.boolean("stream"), "chunk size %d", n)
	}
}

func TestJSONFieldsEdgeCases(t *testing.T) {
	cases := map[string]struct{ in, model string }{
		"escaped value":       {`{"model":"a\"b\\c"}`, `a"b\c`},
		"escaped key":         {`{"\u006dodel":"m1"}`, "m1"},
		"duplicate last wins": {`{"model":"a","model":"b"}`, "b"},
		"not a string":        {`{"model":42}`, ""},
		"missing":             {`{"x":"model"}`, ""},
		"array top level":     {`["model","x"]`, ""},
		"whitespace":          {" \n{ \"model\" :\t\"w\" , \"a\":[1, 2]}", "w"},
		"truncated body":      {`{"model":"keep","messages":[{"content":"cut`, "keep"},
		"value over limit":    {`{"model":"` + strings.Repeat("x", scanLimit) + `"}`, ""},
		"nested strings":      {`{"a":{"b":"}\"]","c":[{"d":"{"}]},"model":"after"}`, "after"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.model, feed(c.in, 3, "model").str("model"))
		})
	}
}

func TestJSONFieldsUsageAndError(t *testing.T) {
	sc := feed(`{"id":"chatcmpl-1","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7},"error":{"message":"secret prompt text","type":"rate_limit","code":"429"}}`, 5, "id", "usage", "error")
	assert.Equal(t, "chatcmpl-1", sc.str("id"))
	n, ok := sc.tokens()
	assert.True(t, ok)
	assert.EqualValues(t, 7, n)
	assert.Equal(t, "upstream error event (type=rate_limit, code=429)", sc.errorSummary())
	assert.NotContains(t, sc.errorSummary(), "secret")

	n, ok = feed(`{"usage":{"input_tokens":10,"output_tokens":5}}`, 2, "usage").tokens()
	assert.True(t, ok)
	assert.EqualValues(t, 15, n, "responses API usage without a total")
	_, ok = feed(`{"id":"x"}`, 2, "usage").tokens()
	assert.False(t, ok)
}

func TestSSEFields(t *testing.T) {
	stream := ": keep-alive comment\r\n\r\n" +
		"event: message\n" +
		"data: {\"id\":\"chatcmpl-first\",\"choices\":[{\"delta\":{\"content\":\"data: {\\\"id\\\":\\\"no\\\"}\"}}]}\n\n" +
		"data: {\"id\":\"chatcmpl-second\",\n" +
		"data: \"usage\":null}\n\n" +
		"id: 7\nretry: 100\n" +
		"data:{\"id\":\"chatcmpl-first\",\"choices\":[],\"usage\":{\"total_tokens\":42}}\r\n\r\n" +
		"data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"code\":500}}\n\n" +
		"data: [DONE]\n\n"
	for _, n := range []int{1, 3, len(stream)} {
		var ids []string
		var tokens []int64
		var errs []string
		e := newSSEFields(newJSONFields(scanLimit, "id", "usage", "error"), func(sc *jsonFields) {
			ids = append(ids, sc.str("id"))
			if v, ok := sc.tokens(); ok {
				tokens = append(tokens, v)
			}
			if s := sc.errorSummary(); s != "" {
				errs = append(errs, s)
			}
		})
		for s := stream; len(s) > 0; {
			k := min(n, len(s))
			e.Write([]byte(s[:k]))
			s = s[k:]
		}
		e.flush()
		assert.Equal(t, []string{"chatcmpl-first", "chatcmpl-second", "chatcmpl-first", "", ""}, ids, "chunk size %d", n)
		assert.Equal(t, []int64{42}, tokens)
		assert.Equal(t, []string{"upstream error event (type=server_error, code=500)"}, errs)
	}
}

// FuzzJSONFields checks the streaming scanner against encoding/json on valid objects.
func FuzzJSONFields(f *testing.F) {
	for _, s := range []string{`{"model":"a"}`, `{"messages":[{"c":"\"}"}],"model":"b"}`, `{"\u006dodel":"c"}`, `{"model":{"x":1}}`, `{}`} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, in string, n int) {
		if n < 1 {
			n = 1
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(in), &m) != nil || m == nil {
			return
		}
		want := ""
		if raw, ok := m["model"]; ok && len(raw) < scanLimit {
			_ = json.Unmarshal(raw, &want)
		}
		got := feed(in, n, "model").str("model")
		require.Equal(t, want, got, "input %q", in)
	})
}
