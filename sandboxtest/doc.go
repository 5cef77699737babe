// Package sandboxtest is the conformance suite for port adapters, in the manner of
// testing/fstest: an adapter's tests call TestRunner (or TestProxyManager, or
// TestSweepAfterCrash) with a harness, and the suite proves, from inside real sandboxes,
// the behaviour and security properties every adapter must share.
//
// The suites run a probe agent in the sandboxes. ProbeImage builds its image archive
// with the local Go toolchain and no registry; an adapter loads it into its runtime
// before calling a suite. A proxy harness also needs the in-sandbox bridge, which the
// bridge package builds. Both work from a module other than this one, so an adapter
// written elsewhere runs the same suite as the adapters shipped here.
package sandboxtest
