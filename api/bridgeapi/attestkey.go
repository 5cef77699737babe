package bridgeapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// The attestation key proves that an attestation comes from the run's bridge. A
// proxy mints one per run (port.LLMSocket.AttestKey) and takes an attestation only
// when it carries that key (AttestKeyHeader); the runner hands the key to the
// bridge alone: in the claim line of a warm pool's stub (Claim.AttestKey), or in
// the bridge's own environment (AttestKeyEnv) for a sandbox started with its run,
// which the bridge removes before any other process exists and guards by making
// itself undumpable (its /proc/PID/environ and memory are then unreadable to the
// sandbox's user). A process that ran before the bridge attested (a pre-booted
// runtime, an image's own entrypoint) sees the LLM socket but never the key, so
// the order of the reports no longer decides which one counts.
const (
	// AttestKeyHeader carries the key on the bridge's attestation request.
	AttestKeyHeader = "X-Agentsandbox-Attest-Key"
	// AttestKeyEnv is the bridge's environment variable holding the key when the
	// sandbox starts with its run; the bridge never passes it to its child.
	AttestKeyEnv = "AGENTSANDBOX_ATTEST_KEY"
	// AttestKeyBytes is a key's entropy (hex-encoded on the wire).
	AttestKeyBytes = 32
)

// NewAttestKey returns a fresh random attestation key for one run.
func NewAttestKey() string {
	b := make([]byte, AttestKeyBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// ValidAttestKey says whether k has the form NewAttestKey gives (64 lowercase hex
// digits).
func ValidAttestKey(k string) bool {
	if len(k) != 2*AttestKeyBytes {
		return false
	}
	return !strings.ContainsFunc(k, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') })
}

// AttestKeyMatches compares the key an attestation carried with the run's, in
// constant time: how long a refusal takes says nothing about the key.
func AttestKeyMatches(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
