// Package api is the home of the project's wire contracts: each cross-process
// protocol lives in one leaf package below it, imported by both of its ends, as
// moby's api module is imported by its client and its daemon.
//
//   - bridgeapi: the in-sandbox bridge and the per-run proxy (socket directory
//     and names, run token file and header, attestation, the warm pool's claim
//     line).
//   - proxydapi: the shared proxy daemon's admin API (paths, request and answer
//     bodies, and the one error table both ends use).
//
// A contract package owns its types and imports only the standard library (and
// errdefs, for an error table), so either end can take it without pulling the other
// end in, and a change of the host's own types (package port) is not a change of the
// wire. Each end converts at its edge (internal/proxydaemon/portconv for the daemon's
// API). A golden file per contract (testdata/wire.golden.json) pins the bytes.
package api
