package sandboxbridge

import (
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

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
