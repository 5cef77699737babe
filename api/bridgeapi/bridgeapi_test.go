package bridgeapi

import (
	"bytes"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"
)

func TestPaths(t *testing.T) {
	if LLMSocketPath != path.Join(SocketDir, LLMSocketName) || EgressSocketPath != path.Join(SocketDir, EgressSocketName) {
		t.Fatalf("paths %q %q", LLMSocketPath, EgressSocketPath)
	}
}

// TestClaimLine: a claim is one JSON line; what follows it is never read, and a
// line without a command is refused.
func TestClaimLine(t *testing.T) {
	c := Claim{Argv: []string{"/agent", "a b"}, Env: []string{"PATH=/bin"}, Forward: true, Egress: true}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte("\n")) != 1 || b[len(b)-1] != '\n' {
		t.Fatalf("not one line: %q", b)
	}
	got, err := ReadClaim(bytes.NewReader(append(b, `{"argv":["/evil"]}`+"\n"...)))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("ReadClaim = %+v, %v", got, err)
	}
	if p, ok := got.Path(); !ok || p != "/bin" {
		t.Fatalf("Path = %q %v", p, ok)
	}
	for _, bad := range []string{"{}\n", `{"argv":[""]}` + "\n", "not json\n", strings.Repeat("x", MaxClaimBytes+1)} {
		if _, err := ReadClaim(strings.NewReader(bad)); !errors.Is(err, ErrBadClaim) {
			t.Errorf("ReadClaim(%.20q) = %v, want ErrBadClaim", bad, err)
		}
	}
}

func TestExitRecord(t *testing.T) {
	a, b := NewExitNonce(), NewExitNonce()
	if len(a) != 2*ExitNonceBytes || a == b {
		t.Fatalf("nonces %q, %q: want %d hex digits, each fresh", a, b, 2*ExitNonceBytes)
	}
	if got, want := string(ExitRecord("abc", -1)), "\x1eagentsandbox-exit abc -1\n"; got != want {
		t.Errorf("ExitRecord = %q, want %q", got, want)
	}
	if got := string(ExitRecord(a, 137)); got != ExitRecordPrefix+a+" 137\n" {
		t.Errorf("ExitRecord = %q", got)
	}
}
