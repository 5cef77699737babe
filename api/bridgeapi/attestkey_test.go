package bridgeapi

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAttestKey(t *testing.T) {
	k := NewAttestKey()
	if !ValidAttestKey(k) || k == NewAttestKey() {
		t.Fatalf("key %q", k)
	}
	for _, bad := range []string{"", k[:63], k + "0", strings.ToUpper(k), strings.Repeat("g", 64)} {
		if ValidAttestKey(bad) {
			t.Errorf("%q is valid", bad)
		}
	}
	if !AttestKeyMatches(k, k) || AttestKeyMatches(k, "") || AttestKeyMatches("", "") || AttestKeyMatches(k, k[:63]) {
		t.Error("AttestKeyMatches")
	}
	c := NewClaim([]string{"/a"}, nil, "", true, time.Minute, time.Now())
	c.AttestKey = "not-hex"
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClaim(strings.NewReader(string(b))); !errors.Is(err, ErrBadClaim) {
		t.Errorf("a claim with a malformed key: %v", err)
	}
	c.AttestKey = k
	b, _ = c.Encode()
	if got, err := ReadClaim(strings.NewReader(string(b))); err != nil || got.AttestKey != k {
		t.Errorf("%+v %v", got, err)
	}
}
