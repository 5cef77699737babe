package bridgeapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxClaimBytes bounds a claim message.
const MaxClaimBytes = 1 << 20

// Claim is the run a pre-created sandbox receives when a warm pool hands it out: the
// bridge starts as a stub that knows nothing of the run, reads one Claim from its
// stdin, and only then starts the agent with it. Its stdin is the claim channel and
// nothing else: the bridge consumes it to the end before the agent exists, and the
// agent gets /dev/null, so the agent can neither read nor speak the channel.
//
// On the wire a claim is one line of JSON. The bridge reads that line and closes its
// stdin: nothing after it is ever read, by the bridge or by the agent.
type Claim struct {
	// Argv is the command, as in the bridge's Config.Argv.
	Argv []string `json:"argv"`
	// Env is the command's whole environment.
	Env []string `json:"env"`
	// Dir is the command's working directory; empty for the sandbox's.
	Dir string `json:"dir,omitempty"`
	// Forward starts the loopback listener forwarding to the LLM socket.
	Forward bool `json:"forward,omitempty"`
	// DeadlineMS is the bridge's deadline in Unix milliseconds; zero for none.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// GraceMS is the bridge's kill grace in milliseconds; zero for the default.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// Egress starts the egress forward proxy listener (EgressProxyAddr).
	Egress bool `json:"egress,omitempty"`
	// ExitNonce, when set, makes the stub end each of its output streams with an
	// exit record (see ExitRecord) once the command's output on it is complete, so
	// the host has the run's end without waiting for the runtime to report the
	// container's exit. It is random per claim and reaches the stub only through
	// the claim channel, so the agent cannot write a record that counts.
	ExitNonce string `json:"exit_nonce,omitempty"`
	// AttestKey, when set, is the run's attestation key (see AttestKeyHeader): the
	// stub sends it with its attestation, and keeps it from every other process of
	// the sandbox. Like the exit nonce it reaches the stub only through the claim
	// channel, so a process that ran before the claim (a pre-booted runtime) cannot
	// send an attestation that counts.
	AttestKey string `json:"attest_key,omitempty"`
}

// ErrBadClaim reports a claim the bridge refuses.
var ErrBadClaim = errors.New("bridge: bad claim")

// Encode returns the claim's wire form.
func (c Claim) Encode() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxClaimBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrBadClaim, len(b), MaxClaimBytes)
	}
	return append(b, '\n'), nil
}

// ReadClaim reads one claim (one line) from r; whatever follows is never used (the
// bridge closes the channel after it). Errors wrap ErrBadClaim.
func ReadClaim(r io.Reader) (Claim, error) {
	var c Claim
	br := bufio.NewReader(io.LimitReader(r, MaxClaimBytes+1))
	line, err := br.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("%w: %v", ErrBadClaim, err)
	}
	if len(line) > MaxClaimBytes {
		return c, fmt.Errorf("%w: longer than %d bytes", ErrBadClaim, MaxClaimBytes)
	}
	if err := json.Unmarshal(line, &c); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadClaim, err)
	}
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return c, fmt.Errorf("%w: no command", ErrBadClaim)
	}
	if c.AttestKey != "" && !ValidAttestKey(c.AttestKey) {
		return c, fmt.Errorf("%w: the attestation key is not %d hex digits", ErrBadClaim, 2*AttestKeyBytes)
	}
	return c, nil
}

// Path returns the PATH in the claim's environment, for looking argv[0] up as the
// command's own environment would ("" when it sets none).
func (c Claim) Path() (string, bool) {
	for _, kv := range c.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v, true
		}
	}
	return "", false
}
