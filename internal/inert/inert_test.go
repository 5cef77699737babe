package inert

import "testing"

// Control sequences, CR/LF, tabs, invalid UTF-8 and bidi overrides an agent puts
// in a path or model name are stored percent-encoded; ordinary text is kept.
func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/chat/completions":            "/v1/chat/completions",
		"gpt-4o mini é 模型":                "gpt-4o mini é 模型",
		"/v1/\x1b]0;pwned\x07":            "/v1/%1B]0;pwned%07",
		"/x\r\n12:00:00  200  POST  /v1/": "/x%0D%0A12:00:00  200  POST  /v1/",
		"a\tb\x7f\xc2\x9b\xff":            "a%09b%7F%C2%9B%FF",
		"evil\u202egpj.exe":               "evil%E2%80%AEgpj.exe",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}
