package sandboxbridge

import (
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// NewClaim returns the claim (bridgeapi.Claim) for argv and env, forwarding when
// forward is true, with the bridge's deadline at timeout+DeadlineSlack from now (none
// when timeout is zero) as Prefix sets it for a sandbox started with its run.
func NewClaim(argv, env []string, dir string, forward bool, timeout time.Duration, now time.Time) bridgeapi.Claim {
	c := bridgeapi.Claim{Argv: argv, Env: env, Dir: dir, Forward: forward}
	if timeout > 0 {
		c.DeadlineMS = now.Add(timeout + DeadlineSlack).UnixMilli()
		c.GraceMS = DeadlineGrace.Milliseconds()
	}
	return c
}

// ClaimConfig returns the bridge configuration that runs the claim, with the
// child's stdin given by the caller (the claim channel is never the child's).
func ClaimConfig(c bridgeapi.Claim) Config {
	// A forwarding run reports its attestation, as a cold one does (Prefix).
	cfg := Config{Argv: c.Argv, Env: c.Env, Dir: c.Dir, NoForward: !c.Forward, Attest: c.Forward, ExitNonce: c.ExitNonce}
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
