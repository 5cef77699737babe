// Package runtokentest holds the run-token test table every verifier of the
// project answers identically: the Go verifier (runtoken) and the shared nginx
// proxy's script (proxypolicy). A third implementation can be held to the same
// answers with it.
package runtokentest

import (
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/runtoken"
)

// Vector is one token presented on a socket that belongs to SocketRun/SocketAttempt.
type Vector struct {
	Name          string
	Token         string
	SocketRun     string
	SocketAttempt int
	// Want is "" for a token that must be accepted, else the refusal's reason.
	Want runtoken.Reason
}

// Keys are the table's secrets: Current and Previous are accepted; Retired is not.
var (
	Current  = []byte("current-secret-0123456789abcdef-0123456789")
	Previous = []byte("previous-secret-0123456789abcdef-012345678")
	Retired  = []byte("retired-secret-0123456789abcdef-0123456789")
)

// Run and Attempt name the socket most vectors are presented on.
const (
	Run     = "run-42.a_b"
	Attempt = 1
	Other   = "run-43"
)

// Vectors returns the table for a verifier whose clock reads now, with the
// default skew (runtoken.DefaultSkew) and maximum lifetime (runtoken.DefaultTTL).
func Vectors(now time.Time) []Vector {
	mint := func(secret []byte, run string, attempt int, exp time.Time) string {
		t, err := runtoken.Mint(secret, run, attempt, exp)
		if err != nil {
			panic(err)
		}
		return t
	}
	soon := now.Add(time.Hour)
	valid := mint(Current, Run, Attempt, soon)
	dot := strings.LastIndexByte(valid, '.')
	sig := valid[dot+1:]
	// A first character changed keeps the signature valid base64url but wrong.
	flipped := "A"
	if sig[0] == 'A' {
		flipped = "B"
	}
	v := []Vector{
		{Name: "valid", Token: valid},
		{Name: "expired", Token: mint(Current, Run, Attempt, now.Add(-runtoken.DefaultSkew-time.Minute)), Want: runtoken.ReasonExpired},
		{Name: "expired within skew", Token: mint(Current, Run, Attempt, now.Add(-runtoken.DefaultSkew/3))},
		{Name: "future beyond skew", Token: mint(Current, Run, Attempt, now.Add(runtoken.DefaultTTL+runtoken.DefaultSkew+time.Minute)), Want: runtoken.ReasonFuture},
		{Name: "wrong attempt", Token: mint(Current, Run, Attempt+1, soon), Want: runtoken.ReasonWrongAttempt},
		{Name: "tampered run id", Token: "run-43" + valid[len(Run):], Want: runtoken.ReasonBadSignature},
		{Name: "tampered expiry", Token: valid[:dot-1] + otherDigit(valid[dot-1]) + valid[dot:], Want: runtoken.ReasonBadSignature},
		{Name: "tampered signature", Token: valid[:dot+1] + flipped + sig[1:], Want: runtoken.ReasonBadSignature},
		{Name: "truncated", Token: valid[:len(valid)-5], Want: runtoken.ReasonMalformed},
		{Name: "signature only", Token: valid[dot:], Want: runtoken.ReasonMalformed},
		{Name: "extra field", Token: signedRaw(Current, Run+"|1|x|"+unix(soon)), Want: runtoken.ReasonMalformed},
		{Name: "extra pipe", Token: signedRaw(Current, Run+"||1|"+unix(soon)), Want: runtoken.ReasonMalformed},
		{Name: "leading zero attempt", Token: signedRaw(Current, Run+"|01|"+unix(soon)), Want: runtoken.ReasonMalformed},
		{Name: "signed negative attempt", Token: signedRaw(Current, Run+"|-1|"+unix(soon)), Want: runtoken.ReasonMalformed},
		{Name: "run id with slash", Token: signedRaw(Current, "../x|1|"+unix(soon)), Want: runtoken.ReasonMalformed},
		{Name: "non-base64url signature", Token: valid[:dot+1] + "+/" + sig[2:], Want: runtoken.ReasonMalformed},
		{Name: "padded signature", Token: valid + "=", Want: runtoken.ReasonMalformed},
		{Name: "empty", Token: "", Want: runtoken.ReasonEmpty},
		{Name: "10 KiB", Token: strings.Repeat("a", 10<<10), Want: runtoken.ReasonTooLong},
		{Name: "rotated secret (previous)", Token: mint(Previous, Run, Attempt, soon)},
		{Name: "retired secret", Token: mint(Retired, Run, Attempt, soon), Want: runtoken.ReasonBadSignature},
		{Name: "another run's token on this socket", Token: mint(Current, Other, Attempt, soon), Want: runtoken.ReasonWrongRun},
	}
	for i := range v {
		v[i].SocketRun, v[i].SocketAttempt = Run, Attempt
	}
	return v
}

func otherDigit(c byte) string {
	if c == '1' {
		return "2"
	}
	return "1"
}

func unix(t time.Time) string { return itoa(t.Unix()) }

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// signedRaw signs arbitrary data, for malformed tokens that carry a valid
// signature (the parser must refuse them before the signature matters).
func signedRaw(secret []byte, data string) string {
	return data + "." + runtoken.Sign(secret, data)
}
