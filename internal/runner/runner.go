// Package runner holds what the runner adapters (Docker, containerd, Nomad,
// Kubernetes) share and their callers never need: the one lifecycle of a one-shot run
// that each fills in with its runtime's steps (Lifecycle, Steps), the labels of
// created resources, the checks of the adapters' own options (owner, bridge; the
// proxy managers' owner too) and a run's deadline. Its sub-packages are the runner
// side's other rooms: captured output, image references and pulls, background
// clean-up, engine and API error classes, memory reports, leases, sessions, and the
// warm pools.
package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// ResourceLabels returns the labels of a resource an adapter creates: the caller's
// extra labels (validated with port.ValidateLabels beforehand) plus the reserved ones.
func ResourceLabels(owner, runID, kind string, extra map[string]string, now time.Time) map[string]string {
	l := make(map[string]string, len(extra)+4)
	for k, v := range extra {
		l[k] = v
	}
	l[port.LabelOwner] = owner
	l[port.LabelRunID] = runID
	l[port.LabelKind] = kind
	l[port.LabelCreatedAt] = now.UTC().Format(time.RFC3339Nano)
	return l
}

// ValidateOwner checks an owner label value with the same rules as run IDs
// (port.ValidateRunID). The error wraps port.ErrInvalidSpec.
func ValidateOwner(owner string) error {
	// An owner is a label value with the run id's alphabet; the message says owner.
	if port.ValidateRunID(owner) != nil {
		switch {
		case owner == "":
			return port.Invalidf("owner is empty")
		case len(owner) > port.MaxRunIDLen:
			return port.Invalidf("owner is %d bytes, over the limit of %d", len(owner), port.MaxRunIDLen)
		default:
			return port.Invalidf("owner %q has characters outside [A-Za-z0-9_.-] or does not start with a letter or digit", owner)
		}
	}
	return nil
}

// ValidateBridge checks that path is an absolute path to an executable regular file,
// as the runners' bridge options require. Errors wrap port.ErrInvalidSpec.
func ValidateBridge(path string) error {
	if !filepath.IsAbs(path) {
		return port.Invalidf("bridge path %q is not absolute", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return port.Invalidf("bridge binary: %v", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return port.Invalidf("bridge binary %s is not an executable file", path)
	}
	return nil
}

// DeadlineCause is why a run whose context (a child of ctx with the run's time
// limit) ended was stopped: the caller's cause when ctx itself ended, else the
// run's own limit.
func DeadlineCause(ctx context.Context, limit time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("run exceeded its %v limit", limit)
}

// EgressOn says the run's socket directory serves egress.
func EgressOn(spec port.RunSpec) bool { return spec.LLM != nil && spec.LLM.Egress }

// BridgeEnv is the environment of a sandbox whose entrypoint is the runner's bridge
// (bridge true): the run's (port.RunSpec.SandboxEnv) plus, with LLM access, the
// run's attestation key (bridgeapi.AttestKeyEnv), which the bridge takes out before
// any other process starts. Without the runner's bridge it is the run's alone: an
// image's own bridge gets no key.
func BridgeEnv(spec port.RunSpec, bridge bool) map[string]string {
	env := spec.SandboxEnv()
	if bridge && spec.LLM != nil && spec.LLM.AttestKey != "" {
		env[bridgeapi.AttestKeyEnv] = spec.LLM.AttestKey
	}
	return env
}

// ExecEnv is the environment of a command run in a session's sandbox (env, the
// command's own): it blanks the attestation key the sandbox's bridge started with
// (BridgeEnv), which a runtime's exec would otherwise pass on from the sandbox's
// environment, so the command never holds it, not even before its bridge starts.
func ExecEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[bridgeapi.AttestKeyEnv] = ""
	return out
}

// EgressPrefix adds the bridge's egress listener to its command line (prefix) when
// the run has egress.
func EgressPrefix(spec port.RunSpec, prefix []string) []string {
	if !EgressOn(spec) {
		return prefix
	}
	return bridgeapi.WithEgress(prefix)
}

// ExecFailed reports a command the bridge could not start (bridgeapi.ExecFailure):
// only a sandbox whose entrypoint is the runner's bridge (bridge) says so, by its
// exit code (bridgeapi.ExitNotFound, bridgeapi.ExitCannotExec) and stderr's tail.
func ExecFailed(bridge bool, exit int, tail []byte) (string, bool) {
	if !bridge || (exit != bridgeapi.ExitNotFound && exit != bridgeapi.ExitCannotExec) {
		return "", false
	}
	return bridgeapi.ExecFailure(tail)
}
