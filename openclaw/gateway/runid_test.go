package gateway

import (
	"encoding/json"
	"testing"
)

// runIDCases are payloads whose runId encoding/json and runIDOf must read alike.
var runIDCases = []string{
	`{"runId":"r-1","sessionKey":"agent:main:s","state":"delta"}`,
	`{"seq":1,"data":{"runId":"nested","x":[1,{"runId":"deeper"}]},"runId":"outer"}`,
	`{"message":"has \"runId\":\"fake\" inside","runId":"real"}`,
	`  { "runId" : "spaced" , "n" : -1.5e3 , "b" : true , "z" : null }  `,
	`{"RUNID":"any case"}`,
	`{"run\u0049d":"escaped key"}`,
	`{"runId":"esc\"aped\\ value \u00e9"}`,
	`{"runId":"first","runId":"last"}`,
	`{"sessionKey":"no run id"}`,
	`{"runId":""}`,
	`{}`,
	`{"a":[],"b":{},"runId":"after empties"}`,
	`{"a":"]}{[","runId":"brackets in strings"}`,
}

func TestRunIDOfMatchesEncodingJSON(t *testing.T) {
	for _, p := range runIDCases {
		var want struct {
			RunID string `json:"runId"`
		}
		if err := json.Unmarshal([]byte(p), &want); err != nil {
			t.Fatalf("bad case %s: %v", p, err)
		}
		got, _ := runIDOf([]byte(p))
		if string(got) != want.RunID {
			t.Errorf("runIDOf(%s) = %q, encoding/json says %q", p, got, want.RunID)
		}
	}
	for _, p := range []string{`"a string"`, `[{"runId":"x"}]`, `{"runId":7}`, `{"runId":null}`, `null`} {
		if id, _ := runIDOf([]byte(p)); len(id) != 0 {
			t.Errorf("runIDOf(%s) = %q, want none", p, id)
		}
	}
}

func FuzzRunIDOf(f *testing.F) {
	for _, p := range runIDCases {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !json.Valid([]byte(p)) {
			return // the frame decoder has validated every payload
		}
		var want struct {
			RunID string `json:"runId"`
		}
		if json.Unmarshal([]byte(p), &want) != nil {
			return // not an object, or runId not a string: the event is dropped either way
		}
		if got, _ := runIDOf([]byte(p)); string(got) != want.RunID {
			t.Errorf("runIDOf(%q) = %q, encoding/json says %q", p, got, want.RunID)
		}
	})
}
