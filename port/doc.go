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
//
// One concern, one file:
//
//	runtimes    runtime.go (Runtime, RuntimeDriver, RegisterRuntime, OpenRuntime: a
//	            runner chosen by a target string, database/sql style)
//	running     runner.go (SandboxRunner), spec.go (RunSpec, its defaults and checks),
//	            result.go (RunResult, ErrorCode, RunError), env.go (the sandbox's
//	            environment), image.go (ImagePuller, pull policy, credentials),
//	            memory.go (MemoryPressure)
//	lifetimes   session.go (SessionRunner: long-running sandboxes), pool.go (Pooler:
//	            warm pools), preload.go (Preload: pre-booted agent runtimes)
//	LLM access  proxy.go (ProxyManager, ProxySpec, Budget, AuditRecord),
//	            spend.go (SpendReconciler), attest.go (what the bridge attests)
//	web access  egress.go (EgressPolicy, its records and guards)
//	git         repo.go (RepoRelay, PullRequester, their policies)
//	ownership   labels.go (the reserved labels), sweep.go (Sweeper)
//	discovery   capabilities.go (what an adapter declares it can do)
//	errors      errors.go (the sentinels, OpError, EntrypointError)
//
// The names of the in-sandbox bridge's wire that hosts need (LLMSocketDir,
// BridgeAddr, Attestation, ...) are api/bridgeapi's, under the port's names.
package port
