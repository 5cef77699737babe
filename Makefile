# The two commands of the README. Both install what they need on a fresh Debian machine.

.PHONY: demo test bench

# The main job: an example sandboxed agent run, end to end.
demo:
	bash scripts/setup.sh
	go run ./examples/quickstart

# The whole test suite against a real Docker engine, containerd, nginx and OpenClaw.
test:
	bash scripts/test.sh

# Benchmarks whose figures are recorded in docs/benchmarks.md.
bench:
	bash scripts/setup.sh
	bash scripts/bench.sh
