package bridge

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
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
	// Argv is the command, as in Config.Argv.
	Argv []string `json:"argv"`
	// Env is the command's whole environment.
	Env []string `json:"env"`
	// Dir is the command's working directory; empty for the sandbox's.
	Dir string `json:"dir,omitempty"`
	// Forward starts the loopback listener forwarding to the LLM socket.
	Forward bool `json:"forward,omitempty"`
	// DeadlineMS is Config.Deadline in Unix milliseconds; zero for none.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// GraceMS is Config.KillGrace in milliseconds; zero for the default.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// Egress starts the egress forward proxy listener (DefaultEgressListen).
	Egress bool `json:"egress,omitempty"`
}

// ErrBadClaim reports a claim the bridge refuses.
var ErrBadClaim = errors.New("bridge: bad claim")

// NewClaim returns the claim for argv and env, forwarding when forward is true, with
// the bridge's deadline at timeout+DeadlineSlack from now (none when timeout is zero)
// as Prefix sets it for a sandbox started with its run.
func NewClaim(argv, env []string, dir string, forward bool, timeout time.Duration, now time.Time) Claim {
	c := Claim{Argv: argv, Env: env, Dir: dir, Forward: forward}
	if timeout > 0 {
		c.DeadlineMS = now.Add(timeout + DeadlineSlack).UnixMilli()
		c.GraceMS = DeadlineGrace.Milliseconds()
	}
	return c
}

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
	return c, nil
}

// Config returns the bridge configuration that runs the claim, with the child's stdin
// given by the caller (the claim channel is never the child's).
func (c Claim) Config() Config {
	cfg := Config{Argv: c.Argv, Env: c.Env, Dir: c.Dir, NoForward: !c.Forward}
	if c.Env == nil {
		cfg.Env = []string{}
	}
	if c.DeadlineMS > 0 {
		cfg.Deadline = time.UnixMilli(c.DeadlineMS)
	}
	if c.GraceMS > 0 {
		cfg.KillGrace = time.Duration(c.GraceMS) * time.Millisecond
	}
	if c.Egress {
		cfg.Egress = DefaultEgressListen
	}
	return cfg
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
