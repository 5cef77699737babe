#!/usr/bin/env bash
# The whole test suite, against the real parts: installs and starts what is missing
# (scripts/setup.sh), then runs every test with those parts required, so a missing
# daemon fails the run instead of skipping tests.
#
# Every run is a new machine for the project: OpenClaw and Node are installed, and the
# bridge binary and every test image are built, from nothing into a cache directory
# created for this run, after the project's own images are removed from Docker and
# containerd. Only Debian packages and Go's module and build caches are reused. Tests
# run in random order (-shuffle=on) with the race detector.
#
# Environment:
#   SANDBOX_WARM_CACHE=1  reuse the developer's cache and images (quicker; not what CI does)
#   SANDBOX_SHUFFLE       the -shuffle value (default on; a seed reproduces an order)
#   SANDBOX_RACE=0        run without the race detector
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# at prints how long the run has taken so far: where the time goes, in the log.
at() { echo "   ($(($(date +%s) - start)) s) $*"; }

fresh=
if [ "${SANDBOX_WARM_CACHE:-0}" != 1 ]; then
  # A short path: unix sockets live under TMPDIR and their paths are limited to 108 bytes.
  fresh=$(mktemp -d /tmp/asb.XXXXXX)
  chmod 711 "$fresh" # the sandbox's uid traverses to sockets under TMPDIR (not list)
  mkdir -p "$fresh/cache" "$fresh/tmp" "$fresh/xdg"
  # Go's build and module caches stay; every other user cache (the bridge binaries that
  # bridge.Build keeps, for one) starts empty.
  GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE)
  export GOCACHE GOMODCACHE
  export SANDBOX_CACHE="$fresh/cache" TMPDIR="$fresh/tmp" XDG_CACHE_HOME="$fresh/xdg"
fi

# Nomad (for the Nomad runner's tests) is built into the cache, by version: minutes of
# CPU from a cold Go build cache, so it runs beside the package, daemon and npm installs,
# which mostly wait on the network and the disk.
nomad_env=$(mktemp)
bash scripts/install-nomad.sh >"$nomad_env" &
nomad_pid=$!
# Kubernetes (control plane, kubelet, etcd) for the Kubernetes runner's tests is built
# the same way, beside it (minutes of CPU from a cold Go build cache, seconds warm).
kube_env=$(mktemp) kube_log=$(mktemp)
bash scripts/install-kubernetes.sh >"$kube_env" 2>"$kube_log" &
kube_pid=$!
trap 'kill "$nomad_pid" "$kube_pid" 2>/dev/null || true; rm -f "$nomad_env" "$kube_env" "$kube_log"; if [ -n "$fresh" ]; then rm -rf "$fresh"; fi' EXIT

bash scripts/setup.sh
at "Debian packages, daemons and runsc ready"
# A real registry for the image pull tests (Debian's docker-registry) and Python for
# the Python agent image builder's tests; each skips what is installed.
eval "$(bash scripts/install-registry.sh)"
export REGISTRY_BIN
bash scripts/install-python.sh
# A real Prometheus scrapes the shared daemon's metrics in its test.
bash scripts/install-prometheus.sh >/dev/null
if [ -n "$fresh" ]; then bash scripts/remove-images.sh; fi

eval "$(bash scripts/install-openclaw.sh)"
at "OpenClaw and Node installed"
export OPENCLAW_BIN NODE24_BIN OPENCLAW_DIR
wait "$nomad_pid" || { echo "building Nomad failed"; exit 1; }
eval "$(cat "$nomad_env")"
at "Nomad built"
export NOMAD_BIN
wait "$kube_pid" || { echo "building Kubernetes failed:"; tail -n 30 "$kube_log"; exit 1; }
eval "$(cat "$kube_env")"
at "Kubernetes built"
export KUBE_BIN_DIR KUBE_VERSION
export SANDBOX_REQUIRE=${SANDBOX_REQUIRE:-all}

race=-race
[ "${SANDBOX_RACE:-1}" = 0 ] && race=
shuffle=${SANDBOX_SHUFFLE:-on}

echo "== go vet"
go vet ./...
at "vetted"

# The host's sensitive files are recorded now and checked after the tests: the suite
# runs as root and plants hostile links, and a test that wrote through one would
# replace a system file (scripts/tripwire.sh names it).
guard=$(mktemp -d)
trap 'kill "$nomad_pid" "$kube_pid" 2>/dev/null || true; rm -rf "$nomad_env" "$kube_env" "$kube_log" "$guard"; if [ -n "$fresh" ]; then rm -rf "$fresh"; fi' EXIT
bash scripts/tripwire.sh record "$guard/tripwire"

# A host that dies mid-run is what the library promises to survive, and so must its
# tests: a go test of the pool and session tests is killed (SIGKILL, every process of
# it) once its sandboxes exist, and the suite below must pass regardless. Each test
# package sweeps the owners of dead test processes first (internal/testsupport/testenv).
if [ "${SANDBOX_CRASH_FIRST:-1}" = 1 ]; then
  echo "== a go test of the pool and session tests, killed mid-run"
  bash scripts/outlive.sh begin "$guard/crash" >/dev/null
  (bash scripts/outlive.sh enter "$guard/crash" "$BASHPID"
    exec go test -count=1 $race -run 'TestPoolRunsThenCleanup|TestSessionConformance' ./adapters/containerd/ >"$guard/crash.log" 2>&1) &
  crash_pid=$!
  crash_cg=$(cat "$guard/crash/cgroup")
  # Its sandboxes: containers whose owner's tag names one of its processes.
  crash_owned() { # [pids]: of the run's processes (default: those alive now)
    local pids=${1:-$(paste -sd'|' "$crash_cg/cgroup.procs" 2>/dev/null)}
    [ -n "$pids" ] || { echo 0; return; }
    for id in $(ctr -n agentsandbox-test containers ls -q 2>/dev/null); do
      ctr -n agentsandbox-test containers info "$id" 2>/dev/null | jq -r '.Labels["dev.agentsandbox.owner"] // empty'
    done | grep -cE -- "-t($pids)-[0-9]+\$" || true
  }
  for _ in $(seq 1 240); do # up to 4 minutes (the package may need compiling first)
    [ "$(crash_owned)" -ge 2 ] && break
    kill -0 "$crash_pid" 2>/dev/null || break
    sleep 1
  done
  if ! kill -0 "$crash_pid" 2>/dev/null; then
    echo "the run to kill ended by itself:"; tail -n 20 "$guard/crash.log"
  fi
  crash_pids=$(paste -sd'|' "$crash_cg/cgroup.procs" 2>/dev/null || echo "$crash_pid")
  if [ -n "$crash_cg" ]; then kill -9 $(cat "$crash_cg/cgroup.procs") 2>/dev/null; else kill -9 "$crash_pid"; fi
  wait "$crash_pid" 2>/dev/null || true
  # Its pool replaces each claimed sandbox, so the count moves while it runs: what
  # counts is what the kill left.
  echo "killed; it left $(crash_owned "$crash_pids") sandboxes behind"
  rmdir "$crash_cg" 2>/dev/null || true
  at "the killed run is over"
fi

echo "== go test $race -shuffle=$shuffle (SANDBOX_REQUIRE=$SANDBOX_REQUIRE)"
# The verbose log is kept whole; what is printed is the summary, the failures and a
# count that shows no test was skipped.
TEST_LOG=${TEST_LOG:-.cache/test.log}
mkdir -p "$(dirname "$TEST_LOG")"
# go test runs in a cgroup of its own: whatever it started and left running is found
# afterwards (scripts/outlive.sh), with the mounts and containers it left.
bash scripts/outlive.sh begin "$guard/outlive"
(bash scripts/outlive.sh enter "$guard/outlive" "$BASHPID"
  exec go test -count=1 $race -shuffle="$shuffle" -timeout 45m -v "$@" ./... >"$TEST_LOG" 2>&1) && rc=0 || rc=$?
grep -E "^(ok|FAIL|---|panic|-test.shuffle)|^\s+--- (FAIL|SKIP)|WARNING: DATA RACE" "$TEST_LOG" | grep -v -- "--- PASS" || true
passes=$(grep -c -- "--- PASS" "$TEST_LOG" || true)
fails=$(grep -c -- "--- FAIL" "$TEST_LOG" || true)
skips=$(grep -c -- "--- SKIP" "$TEST_LOG" || true)
races=$(grep -c -- "WARNING: DATA RACE" "$TEST_LOG" || true)
if [ "$rc" != 0 ]; then
  echo "== failures (the whole log is $TEST_LOG)"
  grep -B 5 -A 40 -E -- "--- FAIL|^panic:|^FAIL|WARNING: DATA RACE" "$TEST_LOG" | head -n 400 || true
fi
at "tests over"
echo "== what outlived the tests"
outlived=0
bash scripts/outlive.sh check "$guard/outlive" "${fresh:-/nonexistent}" "$PWD" || outlived=1
tripped=0
bash scripts/tripwire.sh check "$guard/tripwire" || tripped=1
[ "$outlived$tripped" = 00 ] && echo "nothing: no process, mount or container of the run is left; the host's sensitive files are unchanged"
echo "== $(($(date +%s) - start)) s in all; $races data races"
echo "tests: ${passes} passed, ${fails} failed, ${skips} skipped"
if [ "$SANDBOX_REQUIRE" = all ] && [ "$skips" != 0 ]; then echo "a test skipped with every part required"; exit 1; fi
if [ "$tripped" = 1 ]; then echo "the test run changed a sensitive host file (above)"; exit 1; fi
if [ "$outlived" = 1 ]; then echo "something the test run started outlived it (above)"; exit 1; fi
exit $rc
