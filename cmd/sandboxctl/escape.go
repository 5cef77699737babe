package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentsandbox/sandbox/api/proxydapi"
)

// shown makes an agent-influenced value safe for a terminal table: control bytes
// (escape sequences, CR/LF, tabs that would forge columns), invalid UTF-8 and
// runes that do not print are written as Go escapes (\x1b, \r, \u202e), and a
// backslash as \\, so what the operator reads is what was stored and nothing in
// it acts on the terminal. --json output is left to the JSON encoder.
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == '\\' || (r != ' ' && !unicode.IsPrint(r)) }) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\\':
			b.WriteString(`\\`)
		case r != ' ' && !unicode.IsPrint(r):
			q := strconv.QuoteRune(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// auditRow is one audit record as a row of proxyd audit's table, every field
// the agent could choose passed through shown.
func auditRow(r proxydapi.AuditRecord) string {
	return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Local().Format("15:04:05.000"), r.Status, shown(r.Method), shown(r.Path),
		shown(r.Model), r.Latency.Round(time.Millisecond), shown(r.Blocked), shown(r.CallID))
}
