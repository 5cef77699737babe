// Package runtoken mints and verifies run tokens: the HMAC-SHA256 signed
// credential a sandbox's bridge sends on every call to a shared LLM proxy, in the
// header
//
//	X-Run-Token: {runId}|{attempt}|{expiry}.{base64url(HMAC-SHA256(data, secret))}
//
// where data is "{runId}|{attempt}|{expiry}", expiry is in unix seconds and the
// signature is unpadded base64url. A shared proxy still knows a request's run from
// the socket it arrived on; the token must agree with it (defence in depth), so a
// token copied into another run is useless there.
//
// Verification compares signatures in constant time, accepts the current and the
// previous secret (rotation), bounds clock skew both ways, and refuses with a
// *Error whose Reason says why, never quoting the token.
package runtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Header is the request header that carries a run token (the bridge's wire
// contract names it: bridgeapi.TokenHeader).
const Header = bridgeapi.TokenHeader

// Limits and defaults.
const (
	// MinSecretLen is the shortest secret accepted (256 bits).
	MinSecretLen = 32
	// MaxLen bounds a token; longer input is refused before any parsing.
	MaxLen = 256
	// MaxRunIDLen bounds the run id inside a token (port.MaxRunIDLen).
	MaxRunIDLen = 64
	// MaxAttempt bounds the attempt number.
	MaxAttempt = 1<<31 - 1
	// DefaultTTL is a minted token's lifetime unless the Signer says otherwise.
	DefaultTTL = 24 * time.Hour
	// DefaultSkew is the clock skew tolerated either way.
	DefaultSkew = 30 * time.Second
)

// sigLen is the length of an unpadded base64url HMAC-SHA256.
var sigLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// Reason says why a token was refused.
type Reason string

// Reasons a token is refused. Every one is a distinct sentinel so callers and
// audits can count them.
const (
	ReasonEmpty        Reason = "empty"
	ReasonTooLong      Reason = "too_long"
	ReasonMalformed    Reason = "malformed"
	ReasonBadSignature Reason = "bad_signature"
	ReasonExpired      Reason = "expired"
	ReasonFuture       Reason = "expiry_too_far"
	ReasonWrongRun     Reason = "wrong_run"
	ReasonWrongAttempt Reason = "wrong_attempt"
)

// Error is a refused token. It names the reason and, for a malformed one, which
// part is wrong; it never holds the token or any part of it.
type Error struct {
	Reason Reason
	Detail string
}

// Error says why the token was refused, without the token.
func (e *Error) Error() string {
	if e.Detail == "" {
		return "run token refused: " + string(e.Reason)
	}
	return "run token refused: " + string(e.Reason) + ": " + e.Detail
}

// Is matches an *Error with the same Reason, so errors.Is(err, ErrExpired) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Reason == e.Reason && t.Detail == ""
}

// Sentinels for errors.Is.
var (
	ErrEmpty        error = &Error{Reason: ReasonEmpty}
	ErrTooLong      error = &Error{Reason: ReasonTooLong}
	ErrMalformed    error = &Error{Reason: ReasonMalformed}
	ErrBadSignature error = &Error{Reason: ReasonBadSignature}
	ErrExpired      error = &Error{Reason: ReasonExpired}
	ErrFuture       error = &Error{Reason: ReasonFuture}
	ErrWrongRun     error = &Error{Reason: ReasonWrongRun}
	ErrWrongAttempt error = &Error{Reason: ReasonWrongAttempt}
)

// ErrSecret reports a secret that is too short to sign with.
var ErrSecret = errors.New("runtoken: secret shorter than 32 bytes")

// Claims is what a valid token says.
type Claims struct {
	RunID   string
	Attempt int
	Expiry  time.Time
}

// Keys holds the secrets a verifier accepts: tokens are minted with Current;
// Previous, when set, is still accepted so a rotation does not cut runs in flight.
type Keys struct {
	Current  []byte
	Previous []byte
}

func (k Keys) check() error {
	if len(k.Current) < MinSecretLen || (k.Previous != nil && len(k.Previous) < MinSecretLen) {
		return ErrSecret
	}
	return nil
}

// Mint returns the token for run and attempt, valid until expiry, signed with
// secret. The run id must be 1 to 64 bytes of [A-Za-z0-9_.-] starting with a
// letter or digit (port.ValidateRunID).
func Mint(secret []byte, runID string, attempt int, expiry time.Time) (string, error) {
	if len(secret) < MinSecretLen {
		return "", ErrSecret
	}
	if !validRunID(runID) {
		return "", fmt.Errorf("runtoken: run id is not 1-%d bytes of [A-Za-z0-9_.-] starting with a letter or digit", MaxRunIDLen)
	}
	if attempt < 0 || attempt > MaxAttempt {
		return "", fmt.Errorf("runtoken: attempt %d out of range", attempt)
	}
	if expiry.Unix() <= 0 {
		return "", fmt.Errorf("runtoken: expiry before 1970")
	}
	data := make([]byte, 0, MaxLen)
	data = append(data, runID...)
	data = append(data, '|')
	data = strconv.AppendInt(data, int64(attempt), 10)
	data = append(data, '|')
	data = strconv.AppendInt(data, expiry.Unix(), 10)
	sig := sign(secret, data)
	out := make([]byte, 0, len(data)+1+sigLen)
	out = append(out, data...)
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, sig[:])
	return string(out), nil
}

// Sign returns the unpadded base64url HMAC-SHA256 of data under secret: a
// token's signature part. Mint is the way to make tokens; Sign serves tests and
// other implementations that need a signature over arbitrary data.
func Sign(secret []byte, data string) string {
	s := sign(secret, []byte(data))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

func sign(secret, data []byte) [sha256.Size]byte {
	h := hmac.New(sha256.New, secret)
	h.Write(data)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Verifier checks tokens; make one with NewVerifier. It is safe for concurrent use.
type Verifier struct {
	keys Keys
	// cur and prev hold keyed HMACs for reuse (Reset restores the keyed state).
	cur, prev *sync.Pool
	// skew is the clock skew tolerated both ways.
	skew time.Duration
	// maxTTL bounds how far in the future an expiry may lie.
	maxTTL time.Duration
	now    func() time.Time
}

// VerifierOption configures a Verifier.
type VerifierOption func(*Verifier)

// WithSkew sets the clock skew tolerated either way (default DefaultSkew).
func WithSkew(d time.Duration) VerifierOption { return func(v *Verifier) { v.skew = max(d, 0) } }

// WithMaxTTL sets how far in the future (plus skew) an expiry may lie (default
// DefaultTTL): a token that claims a longer life was not minted by us.
func WithMaxTTL(d time.Duration) VerifierOption { return func(v *Verifier) { v.maxTTL = max(d, 0) } }

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) VerifierOption { return func(v *Verifier) { v.now = now } }

// NewVerifier returns a Verifier for keys. It fails with ErrSecret when a secret
// is shorter than MinSecretLen.
func NewVerifier(keys Keys, opts ...VerifierOption) (*Verifier, error) {
	if err := keys.check(); err != nil {
		return nil, err
	}
	v := &Verifier{keys: keys, skew: DefaultSkew, maxTTL: DefaultTTL, now: time.Now, cur: macPool(keys.Current)}
	if keys.Previous != nil {
		v.prev = macPool(keys.Previous)
	}
	for _, o := range opts {
		o(v)
	}
	return v, nil
}

// Verify checks token's form, signature (current key, then the previous one) and
// expiry, and returns its claims. Errors are *Error.
func (v *Verifier) Verify(token string) (Claims, error) {
	c, data, sig, err := Parse(token)
	if err != nil {
		return Claims{}, err
	}
	if !signedBy(v.cur, data, sig) && (v.prev == nil || !signedBy(v.prev, data, sig)) {
		return Claims{}, ErrBadSignature
	}
	now := v.now()
	switch {
	case now.After(c.Expiry.Add(v.skew)):
		return Claims{}, ErrExpired
	case c.Expiry.After(now.Add(v.maxTTL + v.skew)):
		return Claims{}, ErrFuture
	}
	return c, nil
}

// VerifyFor is Verify plus the check that the token is for runID and attempt:
// the run the request's socket names.
func (v *Verifier) VerifyFor(token, runID string, attempt int) (Claims, error) {
	c, err := v.Verify(token)
	if err != nil {
		return c, err
	}
	switch {
	case c.RunID != runID:
		return Claims{}, ErrWrongRun
	case c.Attempt != attempt:
		return Claims{}, ErrWrongAttempt
	}
	return c, nil
}

func macPool(secret []byte) *sync.Pool {
	key := append([]byte(nil), secret...)
	return &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
}

func signedBy(pool *sync.Pool, data string, sig [sha256.Size]byte) bool {
	h := pool.Get().(hash.Hash)
	h.Reset()
	_, _ = io.WriteString(h, data)
	var want [sha256.Size]byte
	h.Sum(want[:0])
	pool.Put(h)
	return hmac.Equal(want[:], sig[:])
}

// Parse splits a token into its claims, the signed data and the signature,
// checking only its form: every part canonical (decimal without sign or leading
// zeros, unpadded base64url of exactly 32 bytes), nothing more, nothing less. It
// does not check the signature or the expiry (Verifier.Verify does).
func Parse(token string) (c Claims, data string, sig [sha256.Size]byte, err error) {
	switch {
	case token == "":
		return c, "", sig, ErrEmpty
	case len(token) > MaxLen:
		return c, "", sig, ErrTooLong
	}
	// The signature is the fixed-length tail after the last '.' (run ids may hold dots).
	dot := len(token) - sigLen - 1
	if dot < 1 || token[dot] != '.' {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "no signature of the right length after a '.'"}
	}
	data, enc := token[:dot], token[dot+1:]
	if n, derr := base64.RawURLEncoding.Strict().Decode(sig[:], []byte(enc)); derr != nil || n != sha256.Size {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "signature is not unpadded base64url"}
	}
	// Exactly three fields.
	p1 := indexByte(data, '|', 0)
	p2 := indexByte(data, '|', p1+1)
	if p1 < 0 || p2 < 0 || indexByte(data, '|', p2+1) >= 0 {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "want exactly three '|'-separated fields"}
	}
	run, att, exp := data[:p1], data[p1+1:p2], data[p2+1:]
	if !validRunID(run) {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "run id"}
	}
	a, ok := decimal(att, MaxAttempt)
	if !ok {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "attempt"}
	}
	e, ok := decimal(exp, 1<<40)
	if !ok || e == 0 {
		return c, "", sig, &Error{Reason: ReasonMalformed, Detail: "expiry"}
	}
	return Claims{RunID: run, Attempt: int(a), Expiry: time.Unix(e, 0)}, data, sig, nil
}

func indexByte(s string, b byte, from int) int {
	if from < 0 || from > len(s) {
		return -1
	}
	for i := from; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}

// decimal parses a canonical non-negative decimal no greater than limit.
func decimal(s string, limit int64) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > limit {
			return 0, false
		}
	}
	return n, true
}

// validRunID is port.ValidateRunID's rule, repeated so this package has no
// dependencies.
func validRunID(s string) bool {
	if s == "" || len(s) > MaxRunIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}
