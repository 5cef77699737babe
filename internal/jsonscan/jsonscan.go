// Package jsonscan walks JSON bytes by index without decoding them: the fast paths
// that pick one member out of a large or frequent document (LiteLLM's spend pages,
// the OpenClaw gateway's run events) and hand out sub-slices of the input.
package jsonscan

// Space returns the index of the first byte at or after i that is not JSON white
// space (len(b) if there is none).
func Space(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// StringEnd returns the index just past the string starting at b[i], or -1 when
// there is no string there or it does not end.
func StringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// ValueEnd returns the index just past the JSON value starting at b[i], or -1 when
// a string, object or array there does not end. It checks only the nesting: callers
// either validated the document first or decode the value afterwards.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = StringEnd(b, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}
