package runtoken_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/runtoken"
	"github.com/agentsandbox/sandbox/runtoken/runtokentest"
)

func verifier(t testing.TB, now time.Time) *runtoken.Verifier {
	v, err := runtoken.NewVerifier(runtoken.Keys{Current: runtokentest.Current, Previous: runtokentest.Previous},
		runtoken.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVectors(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	v := verifier(t, now)
	for _, vec := range runtokentest.Vectors(now) {
		t.Run(vec.Name, func(t *testing.T) {
			c, err := v.VerifyFor(vec.Token, vec.SocketRun, vec.SocketAttempt)
			if vec.Want == "" {
				if err != nil {
					t.Fatalf("refused a good token: %v", err)
				}
				if c.RunID != vec.SocketRun || c.Attempt != vec.SocketAttempt {
					t.Errorf("claims %+v", c)
				}
				return
			}
			var te *runtoken.Error
			if !errors.As(err, &te) || te.Reason != vec.Want {
				t.Fatalf("err = %v, want reason %s", err, vec.Want)
			}
			if !errors.Is(err, &runtoken.Error{Reason: vec.Want}) {
				t.Errorf("errors.Is does not match the sentinel of %s", vec.Want)
			}
			// The error never quotes the token or its run id.
			if len(vec.Token) > 8 && strings.Contains(err.Error(), vec.Token[:8]) || strings.Contains(err.Error(), runtokentest.Run) {
				t.Errorf("error %q quotes the token", err)
			}
		})
	}
}

func TestMintVerifyRoundTrip(t *testing.T) {
	now := time.Now()
	tok, err := runtoken.Mint(runtokentest.Current, "r1", 0, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "r1|0|") || strings.ContainsAny(tok, "+/=") {
		t.Errorf("token %q is not in the seed's format", tok)
	}
	c, err := verifier(t, now).VerifyFor(tok, "r1", 0)
	if err != nil || c.Expiry.Unix() != now.Add(time.Hour).Unix() {
		t.Fatalf("%+v %v", c, err)
	}
	// Without the previous key configured, a token of the previous key is refused.
	v, _ := runtoken.NewVerifier(runtoken.Keys{Current: runtokentest.Current})
	old, _ := runtoken.Mint(runtokentest.Previous, "r1", 0, now.Add(time.Hour))
	if _, err := v.Verify(old); !errors.Is(err, runtoken.ErrBadSignature) {
		t.Errorf("previous key accepted without rotation: %v", err)
	}
}

func TestMintRefusesBadInput(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	for name, f := range map[string]func() error{
		"short secret": func() error { _, err := runtoken.Mint([]byte("short"), "r", 0, exp); return err },
		"bad run":      func() error { _, err := runtoken.Mint(runtokentest.Current, "a|b", 0, exp); return err },
		"long run": func() error {
			_, err := runtoken.Mint(runtokentest.Current, strings.Repeat("r", 65), 0, exp)
			return err
		},
		"neg attempt": func() error { _, err := runtoken.Mint(runtokentest.Current, "r", -1, exp); return err },
		"old expiry":  func() error { _, err := runtoken.Mint(runtokentest.Current, "r", 0, time.Unix(0, 0)); return err },
	} {
		if f() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := runtoken.NewVerifier(runtoken.Keys{Current: runtokentest.Current, Previous: []byte("x")}); !errors.Is(err, runtoken.ErrSecret) {
		t.Errorf("short previous secret: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	for _, v := range runtokentest.Vectors(now) {
		if len(v.Token) < 1000 {
			f.Add(v.Token)
		}
	}
	v := verifier(f, now)
	f.Fuzz(func(t *testing.T, tok string) {
		c, data, _, err := runtoken.Parse(tok)
		if err != nil {
			var te *runtoken.Error
			if !errors.As(err, &te) {
				t.Fatalf("untyped error %v", err)
			}
			if _, verr := v.Verify(tok); verr == nil {
				t.Fatal("Verify accepted what Parse refused")
			}
			return
		}
		// A parsed token re-mints to itself apart from the signature.
		if !strings.HasPrefix(tok, data+".") || len(tok) > runtoken.MaxLen {
			t.Fatalf("data %q not a prefix of the token", data)
		}
		re, merr := runtoken.Mint(runtokentest.Current, c.RunID, c.Attempt, c.Expiry)
		if merr != nil || !strings.HasPrefix(re, data+".") {
			t.Fatalf("claims %+v do not re-mint to %q: %q %v", c, data, re, merr)
		}
		prev, _ := runtoken.Mint(runtokentest.Previous, c.RunID, c.Attempt, c.Expiry)
		if _, verr := v.Verify(tok); verr == nil && re != tok && prev != tok {
			t.Fatal("Verify accepted a token whose signature is not ours")
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	v := verifier(b, now)
	tok, _ := runtoken.Mint(runtokentest.Current, "bench-run-0001", 3, now.Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.VerifyFor(tok, "bench-run-0001", 3); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleMint() {
	secret := []byte("an-example-secret-of-at-least-32-bytes")
	tok, _ := runtoken.Mint(secret, "run-1", 0, time.Unix(2_000_000_000, 0))
	v, _ := runtoken.NewVerifier(runtoken.Keys{Current: secret}, runtoken.WithClock(func() time.Time { return time.Unix(1_999_990_000, 0) }))
	c, err := v.VerifyFor(tok, "run-1", 0)
	fmt.Println(tok[:strings.LastIndexByte(tok, '.')], c.RunID, c.Attempt, err)
	_, err = v.VerifyFor(tok, "run-2", 0)
	fmt.Println(err)
	// Output:
	// run-1|0|2000000000 run-1 0 <nil>
	// run token refused: wrong_run
}
