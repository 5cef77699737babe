# The two commands of the README. Both install what they need on a fresh Debian machine.
# SANDBOX_FRESH=1 runs any of them as on a new machine (scripts/fresh.sh: empty caches,
# every package installed again): run it before submitting a change to scripts/.

.PHONY: demo test bench

ifeq ($(SANDBOX_FRESH)$(SANDBOX_FRESH_DIR),1)
demo test bench:
	bash scripts/fresh.sh $(MAKE) --no-print-directory $@
else

# The main job: an example sandboxed agent run, end to end (Docker and containerd only).
demo:
	bash scripts/setup.sh demo
	go run ./examples/quickstart

# The whole test suite against a real Docker engine, containerd, nginx and OpenClaw.
test:
	bash scripts/test.sh

# Benchmarks whose figures are recorded in docs/benchmarks.md.
bench:
	bash scripts/setup.sh
	bash scripts/bench.sh
endif
