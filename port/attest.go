package port

import "github.com/agentsandbox/sandbox/api/bridgeapi"

// The isolation attestation is part of the bridge's wire contract; its one
// definition is in api/bridgeapi, and these names are that definition.

// AttestationPath is where the in-sandbox bridge posts its Attestation over the run's
// LLM socket, before it starts the agent. A proxy accepts one per run, and only with the
// run's attestation key (LLMSocket.AttestKey), which the bridge alone holds; any other
// is refused.
const AttestationPath = bridgeapi.AttestationPath

// Attestation is what the in-sandbox bridge observed about its own sandbox at start
// (bridgeapi.Attestation): facts read from the kernel's view inside, not the host's
// intent. The host judges them itself (Violations); the bridge only reports.
type Attestation = bridgeapi.Attestation

// Kernels an Attestation can report.
const (
	// KernelLinux is the host's Linux kernel, shared with the host (runc, crun).
	KernelLinux = bridgeapi.KernelLinux
	// KernelGVisor is gVisor's own kernel in user space (runsc).
	KernelGVisor = bridgeapi.KernelGVisor
)

// RuntimeKernel returns the kernel a sandbox run by the OCI runtime named runtime
// must see (bridgeapi.RuntimeKernel).
func RuntimeKernel(runtime string) string { return bridgeapi.RuntimeKernel(runtime) }

// OOMClassifier is an optional capability of a SandboxRunner (found by type
// assertion): whether every OOM kill is reported as CodeOOMKilled. A runner that
// says false may return a plain SIGKILL exit (137) for a run killed at its memory
// limit, when the only witness it has (Docker's OOM event under gVisor, say) did not
// arrive. A runner without the method classifies every OOM kill.
type OOMClassifier interface {
	OOMExact() bool
}

// RuntimeReporter is an optional capability of a SandboxRunner (found by type
// assertion): the OCI runtime its sandboxes run on.
type RuntimeReporter interface {
	Runtime() string
}

// Attester is an optional capability of a Proxy (found by type assertion): the
// attestation its run's bridge reported, nil before one arrived. Proxies that cannot
// receive one (the nginx proxy) do not implement it.
type Attester interface {
	Attestation() *Attestation
}
