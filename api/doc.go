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
// A contract package imports only the standard library, errdefs and port, so
// either end can take it without pulling the other end in.
package api
