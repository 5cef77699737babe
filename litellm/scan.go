package litellm

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/agentsandbox/sandbox/internal/jsonscan"
)

// A tiny reader over JSON that encoding/json has already validated (json.Valid does
// so without allocating). It hands out sub-slices of the input, so a page of a
// thousand spend rows can be walked, and most rows skipped, without copying them.
// Every function assumes valid input; callers check json.Valid first.

// eachMember calls fn with the raw key (without quotes, escapes untouched) and raw
// value of each member of the object obj, until fn returns false. A non-object is
// skipped silently.
func eachMember(obj []byte, fn func(key, val []byte) bool) {
	i := jsonscan.Space(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = jsonscan.Space(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		ke := jsonscan.StringEnd(obj, i)
		key := obj[i+1 : ke-1]
		i = jsonscan.Space(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = jsonscan.Space(obj, i+1)
		ve := jsonscan.ValueEnd(obj, i)
		if !fn(key, obj[i:ve]) {
			return
		}
		i = jsonscan.Space(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

// eachElem calls fn with each raw element of the array arr until fn returns false.
func eachElem(arr []byte, fn func(val []byte) bool) {
	i := jsonscan.Space(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	for {
		i = jsonscan.Space(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		ve := jsonscan.ValueEnd(arr, i)
		if !fn(arr[i:ve]) {
			return
		}
		i = jsonscan.Space(arr, ve)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i++
	}
}

// keyIs compares a raw key with s, unescaping only when the key has escapes.
func keyIs(key []byte, s string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key) == s
	}
	var k string
	if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
		return false
	}
	return k == s
}

// strVal renders a raw value as a string: strings unescaped, null as "", other
// scalars as written.
func strVal(v []byte) string {
	if len(v) == 0 || isNull(v) {
		return ""
	}
	if v[0] != '"' {
		return string(v)
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(v, &s)
	return s
}

// strEq reports whether the raw value v is the string s, without allocating for
// escape-free strings.
func strEq(v []byte, s string) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == s
	}
	return strVal(v) == s
}

func isNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

// numVal reads a number, or a string holding one (LiteLLM's Decimal columns come
// back either way); null and anything else read as 0, false.
func numVal(v []byte) (float64, bool) {
	if len(v) == 0 || isNull(v) {
		return 0, false
	}
	if v[0] == '"' {
		v = v[1 : len(v)-1]
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

func intVal(v []byte) (int64, bool) {
	f, ok := numVal(v)
	return int64(f), ok
}

// objectOf returns v if it is an object, or the object held in a JSON string (some
// LiteLLM builds return metadata columns as serialized JSON).
func objectOf(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	switch v[0] {
	case '{':
		return v
	case '"':
		s := []byte(strVal(v))
		if json.Valid(s) {
			s = s[jsonscan.Space(s, 0):]
			if len(s) > 0 && s[0] == '{' {
				return s
			}
		}
	}
	return nil
}
