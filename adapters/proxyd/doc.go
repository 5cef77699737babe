// Package proxyd is the client of the shared LLM proxy daemon
// (cmd/sandbox-proxyd): a typed Client of the admin API (whose wire contract,
// shared with the daemon, is api/proxydapi; its names are repeated here), and a
// Manager implementing port.ProxyManager on it.
//
// Where the in-process proxy (adapters/inprocproxy) runs one proxy per run inside the
// host process, the daemon is one long-lived process, possibly a container,
// serving every run of many hosts: each registered run gets its own socket
// directory (the runner mounts it as with any proxy), the socket names the run,
// and the bridge inside the sandbox adds the run's HMAC token
// (runtoken) to every request, which the daemon checks against the socket.
// Runs, budgets and audits are kept in the daemon's registry and survive a
// daemon restart.
//
// A run started with an egress policy (port.ProxySpec.Egress) also gets its
// egress proxy from the daemon, in the same socket directory. The Manager
// resolves the policy's credentials once, at Start, and the daemon holds them in
// memory only; the egress audit comes back with the run's audit when it stops
// (see docs/proxyd.md).
package proxyd
