// Package port defines the interfaces ("ports") that the sandbox facade is built on,
// and the types that cross them.
//
// Adapters live in sibling packages (adapters/docker, adapters/containerd,
// adapters/inprocproxy, litellm) and are checked against these interfaces at compile time
// and, behaviourally, by the conformance suites in sandboxtest.
//
// Every error returned through a port can be classified with errors.Is against the
// sentinels in this package (ErrInvalidSpec, ErrNotFound, ErrUnavailable, ...); most
// arrive wrapped in an *OpError naming the operation and run.
package port
