#!/usr/bin/env bash
# Runs the benchmarks recorded in docs/benchmarks.md. Each benchmark alternates the
# things it compares within one loop and reports quantiles and ratios from that same
# run, so machine noise hits every side alike. Needs the daemons (make bench starts them).
# Pass a regexp to run a subset of the benchmark names, e.g. scripts/bench.sh Proxy
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-.}
# The OpenClaw benchmarks run the pinned CLI and gateway (cached after the first install).
if [ -z "${OPENCLAW_BIN:-}" ]; then
  eval "$(bash scripts/install-openclaw.sh)"
  export OPENCLAW_BIN NODE24_BIN OPENCLAW_DIR
fi

# Every benchmark line also goes to $out, from which internal/benchplot draws the SVG
# pictures in docs/bench (latency side by side, pool vs cold, throughput by concurrency).
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # package, benchmark regexp, iterations
  if [[ "$2" =~ $filter ]]; then
    go test -run '^$' -bench "^Benchmark($2)\$" -benchtime "$3" -benchmem -timeout 60m "$1" 2>&1 |
      grep -E '^(Benchmark|FAIL|panic|ok )|at once|largest' | tee -a "$out" || true
  fi
}

run ./adapters/docker RunOnceVsCLI 30x
run ./adapters/containerd 'RunOverhead|RunOverheadWithProxy' 30x
run ./adapters/containerd CriticalPath 30x
run ./adapters/docker CriticalPath 30x
run ./adapters/docker 'ProxyLatency|ProxyTTFT' 2000x
run ./adapters/docker ProxyStartup 30x
run ./adapters/inprocproxy 'AddedLatency|TimeToFirstToken|StartStop' 2000x
run ./adapters/inprocproxy ConcurrentRuns500 3x
run ./litellm Reconcile50of100k 20x
run ./openclaw/gateway AgentStream 5x
run ./openclaw/gateway RealGatewayAgent 20x
run ./integration OpenClawOneShot 5x
run ./integration ConcurrentSandboxes 1x
run ./adapters/containerd 'PooledRun|PooledRunCreated' 30x
run ./adapters/containerd IdleMemory 1x
run ./adapters/containerd Throughput 1x
run ./adapters/docker Throughput 1x
# Most of the machine for minutes, until something gives (SCALE_MAX caps it).
run ./adapters/containerd LiveSandboxes 1x
run ./adapters/inprocproxy TracingOverhead 3000x

go run ./internal/benchplot -out docs/bench <"$out"
