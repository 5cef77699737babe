#!/usr/bin/env bash
# Runs the benchmarks recorded in docs/benchmarks.md. Each benchmark alternates the
# things it compares within one run and reports ratios of medians, so machine noise
# hits both sides alike. Pass a regexp to run a subset: scripts/bench.sh RunOverhead
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-.}
count=${BENCH_COUNT:-30x}
go test -run '^$' -bench "$pattern" -benchtime "$count" -benchmem \
  ./adapters/... ./litellm/... ./openclaw/... 2>&1 | grep -E '^(Benchmark|ok|FAIL|PASS|goos|cpu)' || true
