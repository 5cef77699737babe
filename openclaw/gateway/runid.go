package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/internal/jsonscan"
)

// runIDOf returns the top-level "runId" of a run event's payload, which the
// frame decoder has already validated as JSON. It is the transport's routing
// key only: the stream decodes the payload itself and checks the id again, so
// a payload this reads differently from encoding/json (duplicate keys) is
// dropped there, never misdelivered. Scanning instead of a second
// json.Unmarshal keeps the event path at one decode of the payload.
//
// Like encoding/json it matches the key case-insensitively and takes the last
// occurrence; a payload without the key has the id "". ok is false when the
// payload is not an object or the value is not a string.
//
// The id aliases payload when it needs no unescaping: looking it up in a map
// as string(id) then costs no allocation.
func runIDOf(payload []byte) (id []byte, ok bool) {
	i := jsonscan.Space(payload, 0)
	if i >= len(payload) || payload[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = jsonscan.Space(payload, i)
		if i >= len(payload) || payload[i] == '}' {
			return id, true
		}
		if payload[i] == ',' {
			i++
			continue
		}
		kEnd := jsonscan.StringEnd(payload, i)
		if kEnd < 0 {
			return nil, false
		}
		key := payload[i+1 : kEnd-1]
		i = jsonscan.Space(payload, kEnd)
		if i >= len(payload) || payload[i] != ':' {
			return nil, false
		}
		i = jsonscan.Space(payload, i+1)
		vEnd := jsonscan.ValueEnd(payload, i)
		if vEnd < 0 {
			return nil, false
		}
		if keyIsRunID(key) {
			v := payload[i:vEnd]
			if len(v) == 0 || v[0] != '"' {
				return nil, false
			}
			if bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
				id = v[1 : len(v)-1]
			} else {
				var s string
				if json.Unmarshal(v, &s) != nil {
					return nil, false
				}
				id = []byte(s)
			}
		}
		i = vEnd
	}
}

func keyIsRunID(key []byte) bool {
	if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
			return false
		}
		key = []byte(k)
	}
	return bytes.EqualFold(key, []byte("runId"))
}
