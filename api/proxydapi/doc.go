// Package proxydapi is the wire contract of the shared LLM proxy daemon's admin
// API (cmd/sandbox-proxyd): JSON over HTTP on the daemon's unix socket. The
// daemon (internal/proxydaemon) serves it and the client (adapters/proxyd) calls it;
// both import this package, so paths, bodies and the error table have one
// definition. ToAPIError and FromAPIError are the two directions of the one
// error table. The bodies use the package's own types (records.go), never the
// host's port types: internal/proxydaemon/portconv converts at both ends.
//
// The run token file the daemon writes into a run's socket directory belongs to
// the bridge's contract (bridgeapi.TokenFile).
package proxydapi
