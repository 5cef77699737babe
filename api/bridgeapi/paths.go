package bridgeapi

// The socket directory and the names in it.
const (
	// SocketDir is where a run's socket directory appears inside the sandbox. It
	// is a top-level path on purpose: a mount under the tmpfs /run would be hidden.
	SocketDir = "/llm-sock"
	// LLMSocketName is the LLM proxy's unix socket in the socket directory.
	LLMSocketName = "llm.sock"
	// EgressSocketName is the egress proxy's unix socket in a run's socket directory.
	EgressSocketName = "egress.sock"
	// EgressCAName is the PEM bundle the agent trusts for TLS through the egress proxy:
	// the run's CA certificate (never its key), followed by the host's system roots
	// when they could be read.
	EgressCAName = "egress-ca.pem"
	// TokenFile is the run token's file in the socket directory, written by a
	// shared proxy daemon (cmd/sandbox-proxyd). When it is there the bridge sends
	// its content as TokenHeader on every request; without it the bridge forwards
	// raw bytes.
	TokenFile = "run-token"
	// TokenHeader carries the run token (format: package runtoken).
	TokenHeader = "X-Run-Token"
)

// Where the bridge listens inside the sandbox.
const (
	// LLMAddr is where the in-sandbox bridge listens; agents use
	// OPENAI_API_BASE=http://127.0.0.1:8080 (an address, not a name:
	// static agents in scratch images may have no resolver for "localhost").
	LLMAddr = "127.0.0.1:8080"
	// EgressProxyAddr is where the bridge listens as an HTTP/HTTPS forward proxy;
	// agents get HTTP_PROXY=http://127.0.0.1:3128 and its kin.
	EgressProxyAddr = "127.0.0.1:3128"
)

// Full paths inside the sandbox: the bridge's defaults.
const (
	// LLMSocketPath is SocketDir/LLMSocketName.
	LLMSocketPath = SocketDir + "/" + LLMSocketName
	// EgressSocketPath is SocketDir/EgressSocketName.
	EgressSocketPath = SocketDir + "/" + EgressSocketName
)
