#!/usr/bin/env bash
# The whole test suite, against the real parts: installs and starts what is missing
# (scripts/setup.sh), then runs every test with those parts required, so a missing
# daemon fails the run instead of skipping tests.
#
# Every run is a new machine for the project: OpenClaw and Node are installed, and the
# bridge binary and every test image are built, from nothing into a cache directory
# created for this run, after the project's own images are removed from Docker and
# containerd. Only Debian packages and Go's module and build caches are reused
# (SANDBOX_FRESH=1 does without those too: scripts/fresh.sh). Tests run in random order
# (-shuffle=on) with the race detector.
#
# On two cores the run is mostly CPU: builds (Nomad, Kubernetes, runsc, the suite with
# -race) and the tests themselves. So the steps overlap, each started as soon as what it
# needs is there: Nomad, Kubernetes and runsc build from the start, beside the package
# installs (network and disk); the vet (-race: it compiles what the tests compile) soaks
# up idle CPU at low priority; the packages that need no cluster are tested while Nomad
# and Kubernetes still build, the cluster packages in a go test of their own once the
# cluster they start is built. Each step's end is printed with the seconds since the start.
#
# Environment:
#   SANDBOX_WARM_CACHE=1  reuse the developer's cache and images (quicker; not what CI does)
#   SANDBOX_SHUFFLE       the -shuffle value (default on; a seed reproduces an order)
#   SANDBOX_RACE=0        run without the race detector
#   SANDBOX_FRESH=1       as on a new machine (scripts/fresh.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SANDBOX_FRESH:-0}" != 1 ] || [ -n "${SANDBOX_FRESH_DIR:-}" ] || exec bash scripts/fresh.sh bash scripts/test.sh "$@"
start=$(date +%s)
# Every script below is one package run (scripts/lib/pkg.sh): the lists are updated at
# most once, and a package asked for by two scripts is installed once.
export SANDBOX_PKG_RUN=${SANDBOX_PKG_RUN:-test.$$.$start}
# at prints how long the run has taken so far: where the time goes, in the log.
at() { echo "   ($(($(date +%s) - start)) s) $*"; }

# shellcheck source=lib/rundir.sh
. scripts/lib/rundir.sh
fresh=
if [ "${SANDBOX_WARM_CACHE:-0}" != 1 ]; then
  # A short path: unix sockets live under TMPDIR and their paths are limited to 108 bytes.
  # The sandbox's uid traverses to sockets under TMPDIR (0711, not list).
  rundir_sweep asb
  fresh=$(rundir_make asb)
  mkdir -p "$fresh/cache" "$fresh/tmp" "$fresh/xdg"
  # Go's build and module caches stay; every other user cache (the bridge binaries that
  # bridge.Build keeps, for one) starts empty.
  GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE)
  export GOCACHE GOMODCACHE
  export SANDBOX_CACHE="$fresh/cache" TMPDIR="$fresh/tmp" XDG_CACHE_HOME="$fresh/xdg"
fi

# The run's own files: the background steps' output, the tripwire's record, the outlive
# state (its cgroup).
guard=$(mktemp -d)
declare -A bg_pid=()
# killtree PID...: the processes and everything they started.
killtree() {
  local p c
  for p in "$@"; do
    kill -STOP "$p" 2>/dev/null || continue
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do killtree "$c"; done
    kill -9 "$p" 2>/dev/null
  done
}
cleanup() {
  killtree "${bg_pid[@]}"
  # A run interrupted during the tests: what it started goes with it (what is left, the
  # next run's packages sweep).
  if [ -s "$guard/outlive/cgroup" ]; then
    kill -9 $(cat "$(cat "$guard/outlive/cgroup")/cgroup.procs" 2>/dev/null) 2>/dev/null || true
  fi
  rm -rf "$guard"
  if [ -n "$fresh" ]; then rundir_remove "$fresh"; fi
}
trap cleanup EXIT

# bg NAME WHAT CMD...: CMD in the background, its stdout in $guard/NAME.out and stderr in
# $guard/NAME.log; when it ends, an `at` line says WHAT (with the step's own timing when
# it prints one: "built in N s").
bg() {
  local name=$1 what=$2
  shift 2
  ("$@" >"$guard/$name.out" 2>"$guard/$name.log" && rc=0 || rc=$?
    echo "$rc" >"$guard/$name.rc"
    if [ "$rc" = 0 ]; then
      at "$what$(grep -ho ' built in [0-9]* s' "$guard/$name.log" | tail -n 1 | sed 's/^ /: /')"
    else
      at "$what: FAILED (exit $rc)"
    fi
    exit "$rc") &
  bg_pid[$name]=$!
}
# await NAME: waits for NAME; when it failed, prints the end of its log and returns 1.
await() {
  local rc=1
  wait "${bg_pid[$1]}" 2>/dev/null || true
  unset "bg_pid[$1]"
  read -r rc <"$guard/$1.rc" 2>/dev/null || true
  [ "$rc" = 0 ] && return 0
  echo "== $1 failed; the end of its output:"
  tail -n 40 "$guard/$1.log"
  return 1
}

race=-race
[ "${SANDBOX_RACE:-1}" = 0 ] && race=
shuffle=${SANDBOX_SHUFFLE:-on}

# From the start, beside the package installs: the builds. Nomad and Kubernetes (the
# Nomad and Kubernetes runners' tests; minutes of CPU from a cold Go build cache, seconds
# warm), gVisor's runsc (setup.sh's runtimes step then finds it), and the package the
# killed run below tests (compiled only: its run waits for the daemons).
bg nomad "Nomad built" bash scripts/install-nomad.sh
bg kube "Kubernetes built" bash scripts/install-kubernetes.sh
if [ "$(id -u)" = 0 ]; then bg runsc "runsc built" bash scripts/install-runsc.sh; fi
bg crashbuild "the killed run's package compiled" go test -count=1 $race -c -o /dev/null ./adapters/containerd/

bash scripts/setup.sh tests
at "Debian packages and daemons ready"
# What only some tests need, beside the rest: a real registry for the image pull tests
# (Debian's docker-registry), Python for the Python agent image builder's tests, a real
# Prometheus to scrape the shared daemon's metrics, and OpenClaw and Node from npm.
bg installers "registry, Python, Prometheus, OpenClaw and Node installed" bash -c 'set -e
  bash scripts/install-registry.sh
  bash scripts/install-python.sh >&2
  bash scripts/install-prometheus.sh >&2
  bash scripts/install-openclaw.sh'
# go vet, with the tests' build flags: it compiles what the tests compile, so its work is
# theirs too; at low priority, it takes what CPU the other steps leave.
bg vet "vetted" nice -n 10 go vet $race ./...
if [ -n "$fresh" ]; then bash scripts/remove-images.sh; fi

# The runtimes (crun, runsc) registered with Docker and containerd, before the tripwire
# records the files that registering writes.
if [ -n "${bg_pid[runsc]:-}" ]; then await runsc || exit 1; fi
bash scripts/setup.sh runtimes
at "runtimes registered"

# The host's sensitive files are recorded now and checked after the tests: the suite
# runs as root and plants hostile links, and a test that wrote through one would
# replace a system file (scripts/tripwire.sh names it).
bash scripts/tripwire.sh record "$guard/tripwire"

# A host that dies mid-run is what the library promises to survive, and so must its
# tests: a go test of the pool and session tests is killed (SIGKILL, every process of
# it) once its sandboxes exist, and the suite below must pass regardless. Each test
# package sweeps the owners of dead test processes first (internal/testsupport/testenv).
# It runs before any package of the suite starts.
await crashbuild || exit 1
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

await installers || exit 1
eval "$(cat "$guard/installers.out")"
export REGISTRY_BIN OPENCLAW_BIN NODE24_BIN OPENCLAW_DIR
export SANDBOX_REQUIRE=${SANDBOX_REQUIRE:-all}

# The packages whose tests start a Nomad or Kubernetes cluster (their test binary links a
# cluster rig) wait for those builds; every other package is tested now. Those that start
# only Nomad clusters are tested as soon as Nomad is built (it builds in about half the
# time of Kubernetes), the rest once Kubernetes is. Each go test runs without the variable
# of a build it does not wait for, so a package put on the wrong side fails (with every
# part required) instead of passing unseen.
# go test starts the packages in the order given, two at a time: the slowest go first, so
# that the longest (integration: about half of the suite's time) does not start last.
# Slowest by the last run's log when there is one, else by the suite's runs recorded in
# docs/testing.md.
TEST_LOG=${TEST_LOG:-.cache/test.log}
slowest_first() {
  local m
  m=$(go list -m)
  awk -v m="$m" -v prev="$TEST_LOG" '
    BEGIN {
      n = split("integration:1700 adapters/containerd:460 preload:350 adapters/nomad:300 adapters/docker:290 adapters/kubernetes:290 openclaw/gateway:140 adapters/gitcli:130 openclaw:100 openclaw/billing:80", h, " ")
      for (i = 1; i <= n; i++) { split(h[i], kv, ":"); t[m "/" kv[1]] = kv[2] }
      while ((getline l < prev) > 0) { split(l, f, /[ \t]+/); if ((f[1] == "ok" || f[1] == "FAIL") && f[3] ~ /^[0-9.]+s$/) t[f[2]] = f[3] + 0 }
    }
    { print (($0 in t) ? t[$0] : 0), $0 }' | sort -s -rn -k1,1 | cut -d' ' -f2
}
# rig_pkgs WANT SKIP: the test packages whose binary links a cluster rig matching WANT
# and none matching SKIP (awk regular expressions over import paths).
rig_deps=$(go list -test -f '{{if not .ForTest}}{{.ImportPath}} {{join .Deps " "}}{{end}}' ./...)
rig_pkgs() {
  awk -v want="$1" -v skip="$2" '$1 ~ /\.test$/ {
      w = 0; s = 0
      for (i = 2; i <= NF; i++) { if ($i ~ want) w = 1; if ($i ~ skip) s = 1 }
      if (w && !s) { sub(/\.test$/, "", $1); print $1 }
    }' <<<"$rig_deps" | sort -u | slowest_first
}
nomad_rig='/(nomadtest|nomadlocal)$' kube_rig='/(kubetest|kubelocal)$'
nomad_pkgs=$(rig_pkgs "$nomad_rig" "$kube_rig")
kube_pkgs=$(rig_pkgs "$kube_rig" '^$')
other_pkgs=$(go list ./... | grep -vxF -f <(printf '%s\n' $nomad_pkgs $kube_pkgs) | slowest_first)
[ -n "$nomad_pkgs" ] && [ -n "$kube_pkgs" ] || { echo "no package starts a Nomad or no package a Kubernetes cluster: the cluster rigs moved? (test.sh looks for nomadtest and kubetest)"; exit 1; }

echo "== go test $race -shuffle=$shuffle (SANDBOX_REQUIRE=$SANDBOX_REQUIRE)"
# The verbose log is kept whole; what is printed is the summary, the failures and a
# count that shows no test was skipped.
mkdir -p "$(dirname "$TEST_LOG")"
# Both go tests run in one cgroup of their own: whatever they started and left running is
# found afterwards (scripts/outlive.sh), with the mounts and containers they left.
bash scripts/outlive.sh begin "$guard/outlive"
extra=("$@")
gotest() { # log, packages...: go test in the outlive cgroup
  local log=$1
  shift
  (bash scripts/outlive.sh enter "$guard/outlive" "$BASHPID"
    exec go test -count=1 $race -shuffle="$shuffle" -timeout 45m -v "${extra[@]}" "$@" >"$log" 2>&1)
}
unset NOMAD_BIN KUBE_BIN_DIR
# shellcheck disable=SC2086
bg tests "the packages that need no cluster tested" gotest "$TEST_LOG" $other_pkgs
at "go test of the $(wc -w <<<"$other_pkgs") packages that need no cluster started"

# The cluster packages: the Nomad-only ones once Nomad is built (with NOMAD_BIN only), the
# Kubernetes ones (some start both) once Kubernetes is built too.
for g in nomad kube; do : >"$guard/test-$g.log"; done
built=1
if await nomad; then
  eval "$(cat "$guard/nomad.out")"
  export NOMAD_BIN
  # When Kubernetes was found built (a warm cache), all the cluster packages go in one go
  # test, two at a time, as a third go test's clusters would crowd a 2-core machine.
  for _ in $(seq 60); do [ -e "$guard/kube.rc" ] && break; sleep 1; done
  if [ ! -e "$guard/kube.rc" ]; then
    # shellcheck disable=SC2086
    bg nomadtests "the Nomad cluster packages tested" gotest "$guard/test-nomad.log" $nomad_pkgs
    at "go test of the $(wc -w <<<"$nomad_pkgs") Nomad cluster packages started"
    nomad_pkgs=
  fi
else
  built=0
fi
if [ "$built" = 1 ] && await kube; then
  eval "$(cat "$guard/kube.out")"
  export KUBE_BIN_DIR KUBE_VERSION
  kube_pkgs=$(printf '%s\n' $nomad_pkgs $kube_pkgs | slowest_first)
  # shellcheck disable=SC2086
  bg kubetests "the Kubernetes cluster packages tested" gotest "$guard/test-kube.log" $kube_pkgs
  at "go test of the $(wc -w <<<"$kube_pkgs") cluster packages started (those of Kubernetes)"
else
  built=0
fi

rc=0
await tests || rc=1
for g in nomadtests kubetests; do
  if [ -n "${bg_pid[$g]:-}" ]; then await "$g" || rc=1; fi
done
if [ "$built" = 0 ]; then
  echo "the cluster packages were not all tested: a build failed (above)"
  rc=1
fi
# One log, in the order the packages were started.
cat "$guard/test-nomad.log" "$guard/test-kube.log" >>"$TEST_LOG"
grep -E "^(ok|FAIL|---|panic|-test.shuffle)|^\s+--- (FAIL|SKIP)|WARNING: DATA RACE" "$TEST_LOG" | grep -v -- "--- PASS" || true
passes=$(grep -c -- "--- PASS" "$TEST_LOG" || true)
fails=$(grep -c -- "--- FAIL" "$TEST_LOG" || true)
skips=$(grep -c -- "--- SKIP" "$TEST_LOG" || true)
races=$(grep -c -- "WARNING: DATA RACE" "$TEST_LOG" || true)
if [ "$rc" != 0 ]; then
  echo "== failures (the whole log is $TEST_LOG)"
  grep -B 5 -A 40 -E -- "--- FAIL|^panic:|^FAIL|WARNING: DATA RACE" "$TEST_LOG" | head -n 400 || true
  # Last, so a reader of the output's end sees them: the messages of the failed tests
  # (printed while they ran, which can be far from their "--- FAIL" line).
  echo "== what the failed tests printed"
  awk -f scripts/lib/test-output.awk "$TEST_LOG" "$TEST_LOG" | tail -n 300 || true
fi
at "tests over"
await vet || rc=1
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
