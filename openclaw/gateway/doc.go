// Package gateway is a WebSocket client for the OpenClaw gateway: the long-running
// OpenClaw service that runs agent turns for many sessions at once.
//
// Dial performs the gateway handshake (connect.challenge, connect with protocol
// 3..4, hello-ok) and starts one reader and one writer goroutine; WithDialContext
// reaches a gateway over any net.Conn (a unix socket, another namespace).
// Request is the generic call; the gateway's methods have typed wrappers, one
// file each: Agent starts a turn and returns an AgentRun whose Updates stream
// the answer and whose Wait returns the final result; Abort (chat.abort),
// AgentWait (agent.wait), SessionsPatch, ConfigGet and ConfigPatch.
//
// The transport knows requests, responses and run ids, nothing of agents: a call
// that gets more than one response (agent: accepted, then final) is a stream,
// and run events reach the stream registered under their runId. A response read
// before the connection ends is delivered even if the end follows at once.
//
// The gateway broadcasts chat and agent events to every operator connection, so
// the client filters fail-closed: an event reaches a run only when its runId is
// the run's and its sessionKey, canonicalised, is the run's session key. Events
// missing either are dropped, and heartbeat acknowledgements (HEARTBEAT_OK)
// never appear in answer text.
//
// Liveness: the gateway sends a tick event every policy.tickIntervalMs; the client
// also pings. When no frame arrives for 2.5 tick intervals, or no pong for as
// long, the connection is declared dead and every pending call and run fails
// with an error wrapping ErrClosed.
//
// The package gatewaytest provides a scripted gateway double for tests.
package gateway
