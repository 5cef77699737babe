// Package integration holds the tests that need the whole stack on real runtimes, and
// nothing else (it has no non-test code):
//
//   - the facade end to end: a sandboxed agent calls a fake LiteLLM through the
//     in-process proxy and the bridge, and the run's usage is reconciled against the
//     fake's spend logs; the real OpenClaw one-shot included;
//   - the in-process proxy manager under the proxy conformance suite, with real
//     sandboxes on Docker and containerd (here, not in adapters/inprocproxy, so the proxy's
//     unit tests never depend on a runtime adapter building);
//   - this module used from another one: a throwaway module with a replace directive
//     runs the conformance suite against the Docker runner, and the quickstart copied
//     verbatim runs on both runtimes.
package integration
