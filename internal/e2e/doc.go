// Package e2e holds the end-to-end tests of the facade on real runtimes: a sandboxed
// agent calls a fake LiteLLM through the in-process proxy and the bridge, and the run's
// usage is reconciled against the fake's spend logs.
package e2e
