package openclaw

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/agentsandbox/sandbox/port"
)

// ErrInvariant reports a setting that would break one of the invariants every
// generated config holds (sandbox off, cron off, ...). It always comes with
// port.ErrInvalidSpec, inside a *SettingError naming the setting.
var ErrInvariant = errors.New("setting breaks a sandbox invariant")

// Invariant names a property every generated openclaw.json holds.
type Invariant string

// The invariants NewConfig enforces.
const (
	// InvSandboxOff: OpenClaw's built-in sandbox stays off. There is no container
	// runtime inside our sandbox; the sandbox around OpenClaw is ours.
	InvSandboxOff Invariant = "sandbox-off"
	// InvCronOff: OpenClaw's scheduler stays off; the host decides when agents run,
	// and a second scheduler would make LLM calls outside any run.
	InvCronOff Invariant = "cron-off"
	// InvElevatedOff: elevated tool mode stays off; it bypasses tool policy.
	InvElevatedOff Invariant = "elevated-off"
	// InvHeartbeatOff: heartbeats stay off ("0m"); heartbeat turns make unattributed
	// LLM calls and their HEARTBEAT_OK replies leak into broadcast chat events.
	InvHeartbeatOff Invariant = "heartbeat-off"
	// InvSingleProvider: models.mode is "replace" with exactly one provider, the LLM
	// proxy; no built-in provider, catalog or endpoint can route around it.
	InvSingleProvider Invariant = "single-provider"
	// InvToolDeny: the required tools stay denied and are never allowed.
	InvToolDeny Invariant = "tool-deny"
	// InvOffline: nothing reaches the network at start-up (catalog refresh, update
	// checks, mDNS) and no forward proxy is configured.
	InvOffline Invariant = "offline-startup"
	// InvGatewayAuth: the gateway binds where the builder says and requires the
	// configured token; the Control UI stays off.
	InvGatewayAuth Invariant = "gateway-token-auth"
	// InvSingleAgent: exactly one agent, under keyed agents.entries (agents.list is
	// legacy), using the builder's workspace and model.
	InvSingleAgent Invariant = "single-agent"
)

// SettingError reports a config setting that was refused. It matches
// port.ErrInvalidSpec under errors.Is, and ErrInvariant too when Invariant is set.
type SettingError struct {
	// Setting is the dotted config path the caller gave (or the builder option's
	// config path), e.g. "cron.enabled" or "agents.defaults.timeoutSeconds".
	Setting string
	// Invariant is the invariant the setting would break; empty for plain
	// validation errors.
	Invariant Invariant
	// Reason says what is wrong.
	Reason string
}

// Error implements error.
func (e *SettingError) Error() string {
	if e.Invariant != "" {
		return fmt.Sprintf("openclaw config: setting %s refused (invariant %s): %s", e.Setting, e.Invariant, e.Reason)
	}
	return fmt.Sprintf("openclaw config: setting %s: %s", e.Setting, e.Reason)
}

// Unwrap returns port.ErrInvalidSpec, and ErrInvariant for invariant breaches.
func (e *SettingError) Unwrap() []error {
	if e.Invariant != "" {
		return []error{port.ErrInvalidSpec, ErrInvariant}
	}
	return []error{port.ErrInvalidSpec}
}

func quote(s string) string { return strconv.Quote(s) }
