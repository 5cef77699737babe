// Package bridgeapi is the contract between the in-sandbox bridge
// (cmd/sandbox-bridge) and the proxy that serves a run's socket directory (the
// in-process proxy, the shared daemon, the OpenClaw gateway's router), and between
// a warm pool and the bridge stub it starts.
//
// Both ends import it, so the names, paths and JSON below have exactly one
// definition:
//
//   - the socket directory a runner mounts at SocketDir, with the LLM socket
//     (LLMSocketName), the egress socket and CA bundle (EgressSocketName,
//     EgressCAName), and the shared daemon's run token (TokenFile, sent as
//     TokenHeader);
//   - the loopback addresses the bridge serves inside the sandbox (LLMAddr,
//     EgressProxyAddr);
//   - the isolation report the bridge posts before the agent starts
//     (Attestation at AttestationPath) and how the host judges it (Violations);
//   - the claim line a pooled bridge stub reads from its stdin (Claim, NewClaim), and
//     the exit record it ends its output streams with (ExitRecord);
//   - the bridge's command line: its flags (FlagAttest, ...) and the builders the
//     runners use (Prefix, WithEgress, PreloadArgs), with the deadline's slack and
//     grace;
//   - what the bridge tells its host on the command's streams: its exit codes
//     (ExitBridgeFailed, ExitCannotExec, ExitNotFound), the stderr notices (OOMNotice,
//     ExecFailedPrefix, PreloadGone) and their readers (ExecFailure, MissingEntry,
//     PreloadGoneIn), and the passed-through output's DroppedNotice and OutputMark.
//
// testdata/wire.golden.json pins all of it byte for byte (TestWireGolden), and
// cmd/sandbox-bridge's tests check that its flags are exactly the ones named here.
//
// It imports only the standard library: the bridge is a static binary inside
// every sandbox and takes nothing else of the project.
package bridgeapi
