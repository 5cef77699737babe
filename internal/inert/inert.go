// Package inert makes agent-chosen text safe to show an operator: what an audit
// record keeps of a request path or a model name never acts on a terminal or a
// log reader. It imports only the standard library, so every front (the Go
// engine, the billing router, the nginx audit reader) applies the same rule
// without linking each other.
package inert

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every byte that could act on a terminal or a log reader
// percent-encoded: control bytes (C0, DEL, C1), invalid UTF-8 and runes that do
// not print (bidirectional overrides, zero-width marks). An audit record keeps
// an agent's path and model in this form, so what an operator's tools show of
// them is what was sent, never an escape sequence, a carriage return or an
// extra line. A string with none of them is returned as is.
func String(s string) string {
	i := strings.IndexFunc(s, needsEscape)
	if i < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if (r == utf8.RuneError && n == 1) || needsEscape(r) {
			for _, c := range []byte(s[:n]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

func needsEscape(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }
