#!/usr/bin/env bash
# Installs and starts what the library's examples, tests and benchmarks need on a Debian
# machine, in steps:
#
#   setup.sh demo       Docker Engine and containerd, installed and started: what
#                       `make demo` needs, and nothing else
#   setup.sh tests      the same, plus nginx (njs for the shared proxy), socat, iproute2,
#                       git (the git relay and its tests) and jq
#   setup.sh runtimes   the OCI runtimes besides runc: crun (Debian's) and gVisor's runsc
#                       (built, scripts/install-runsc.sh), registered with Docker and
#                       containerd
#   setup.sh            tests, then runtimes (what `make test` and `make bench` need)
#
# Packages are installed through scripts/lib/pkg.sh. Idempotent: installed packages and
# running daemons are left as they are.
set -euo pipefail
here=$(dirname "$0")
# SANDBOX_FRESH=1: as on a new machine (scripts/fresh.sh).
[ "${SANDBOX_FRESH:-0}" != 1 ] || [ -n "${SANDBOX_FRESH_DIR:-}" ] || exec bash "$here/fresh.sh" bash "$0" "$@"
# shellcheck source=lib/pkg.sh
. "$here/lib/pkg.sh"

log() { printf '[setup] (%d s) %s\n' "$SECONDS" "$*" >&2; }

steps=("$@")
((${#steps[@]})) || steps=(tests runtimes)
want_pkgs=() daemons= runtimes= demo=
for s in "${steps[@]}"; do
  case "$s" in
  demo) want_pkgs+=(docker.io containerd git) daemons=1 demo=1 ;;
  tests) want_pkgs+=(docker.io containerd git nginx-light libnginx-mod-http-js socat iproute2 jq) daemons=1 ;;
  runtimes) runtimes=1 ;;
  *) echo "usage: $0 [demo|tests|runtimes]..." >&2; exit 2 ;;
  esac
done

# A machine where an earlier version of the test suite ran may have a git config in
# /etc/shadow: put the previous one back first (scripts/repair-shadow.sh says when).
bash "$here/repair-shadow.sh" || log "check /etc/shadow by hand (above)"

# The demo's own build runs beside the package install (CPU beside network and disk): the
# quickstart, and its agent and the bridge as the library builds them (cgo off, -trimpath),
# so that `go run ./examples/quickstart` finds them compiled. Best effort: go run reports
# what fails.
warm_pid=
if [ -n "$demo" ] && command -v go >/dev/null 2>&1; then
  (cd "$here/.." && go build -o /dev/null ./examples/quickstart &&
    CGO_ENABLED=0 GOOS=linux go build -trimpath ./cmd/sandbox-bridge ./examples/quickstart/agent) >/dev/null 2>&1 &
  warm_pid=$!
fi

if ((${#want_pkgs[@]})); then
  pkg_install "${want_pkgs[@]}"
fi

run_dir=${SANDBOX_RUN_DIR:-/var/run}
log_dir=${SANDBOX_LOG_DIR:-/var/log/agentsandbox}
mkdir -p "$log_dir"

# The daemons outlive this script and whoever ran it: they start with a clean environment,
# never the caller's TMPDIR or caches (the test script's are removed after its run, and a
# runtime whose TMPDIR is gone can no longer exec into a container).
daemon_env=(env -i PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8)

wait_for() { # socket, what, seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    [ -S "$1" ] && return 0
    sleep 0.1
  done
  log "$2 did not create $1 in $3 s; last log lines:"; tail -n 20 "$log_dir/$2.log" >&2 || true
  return 1
}

# detached CMD...: CMD in the background with stdin from /dev/null and no descriptor of
# ours above stderr: a daemon outlives this script, and one that kept a lock's or a pipe's
# descriptor of its caller would hold that lock, or the pipe open, for as long as it runs.
detached() {
  (for fd in /proc/$BASHPID/fd/*; do
    n=${fd##*/}
    if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-"; fi
  done
  exec "$@" </dev/null) &
}

if [ -n "$daemons" ]; then
  # A daemon an earlier version of this script started inherited its caller's TMPDIR, which is
  # gone now: give it back an empty one, or every exec into a container fails.
  for d in containerd dockerd; do
    for pid in $(pidof "$d" 2>/dev/null); do
      t=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^TMPDIR=//p')
      if [ -n "$t" ] && [ ! -d "$t" ]; then
        log "$d (pid $pid) has lost its TMPDIR; making it again"
        mkdir -p "$t" && chmod 1777 "$t"
      fi
    done
  done

  # containerd: dockerd uses it, and the containerd adapter talks to it directly.
  if ! ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
    log "starting containerd"
    detached "${daemon_env[@]}" nohup containerd >"$log_dir/containerd.log" 2>&1
    wait_for /run/containerd/containerd.sock containerd 30
  fi

  # dockerd without iptables or masquerading: no container it starts can route off the
  # machine even by mistake. Sandboxes use network=none regardless.
  if ! docker version >/dev/null 2>&1; then
    log "starting dockerd"
    detached "${daemon_env[@]}" nohup dockerd --containerd=/run/containerd/containerd.sock --iptables=false --ip-masq=false \
      >"$log_dir/dockerd.log" 2>&1
    wait_for "$run_dir/docker.sock" dockerd 60
    for _ in $(seq 1 100); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  docker version --format 'docker engine {{.Server.Version}} (API {{.Server.APIVersion}})' >&2
fi
if [ -n "$warm_pid" ]; then
  log "waiting for the demo's compile (beside the installs)"
  wait "$warm_pid" || true
  log "the demo is compiled"
fi

# Everything below is the runtimes step.
[ -n "$runtimes" ] || exit 0
# OCI runtimes besides runc (see the adapters' WithRuntime): gVisor's runsc and crun.
# runsc is built at a pinned version from the Go module proxy (scripts/install-runsc.sh:
# Debian's 2022 release lacks /proc files the conformance suite reads); Debian's is the
# fallback when that build fails. Either runs without a network stack of its own
# (sandboxes have none anyway); the built one on the systrap platform (no KVM needed),
# allowed to connect to the host unix sockets mounted into the sandbox (--host-uds=open:
# the LLM socket), Debian's on ptrace. containerd's runc shim cannot pass flags, so
# runsc gets a wrapper; Docker gets them in daemon.json.
runsc_wrapper=/usr/local/bin/runsc-sandbox
pkg_install jq
pkg_install_optional crun
runsc_bin='' runsc_args=()
if [ "$(id -u)" = 0 ] && runsc_bin=$(bash "$here/install-runsc.sh"); then
  runsc_args=(--network=none --host-uds=open --oci-seccomp)
else
  log "building runsc failed: using Debian's (the runsc conformance tests will say what it lacks)"
  pkg_install_optional runsc
  command -v runsc >/dev/null && runsc_bin=$(command -v runsc) runsc_args=(--platform=ptrace --network=none)
fi
if [ -n "$runsc_bin" ] && [ "$(id -u)" = 0 ]; then
  want="#!/bin/sh
exec $runsc_bin ${runsc_args[*]} \"\$@\""
  if [ ! -x "$runsc_wrapper" ] || [ "$(cat "$runsc_wrapper")" != "$want" ]; then
    log "installing $runsc_wrapper ($runsc_bin)"
    printf '%s\n' "$want" >"$runsc_wrapper.tmp" && chmod 755 "$runsc_wrapper.tmp" && mv "$runsc_wrapper.tmp" "$runsc_wrapper"
  fi
fi
# Docker: register the runtimes in daemon.json and have dockerd reload it (SIGHUP: the
# runtimes are a live-reloadable setting, no restart). An existing daemon.json is
# merged with jq when present, else left alone with a message.
daemon_json=/etc/docker/daemon.json
runtimes='{}'
[ -n "$runsc_bin" ] && runtimes=$(printf '%s\n' "${runsc_args[@]}" | jq -R . | jq -cs --arg path "$runsc_bin" '{runsc: {path: $path, runtimeArgs: .}}')
if command -v crun >/dev/null; then
  crun_json=$(printf '"crun":{"path":"%s"}' "$(command -v crun)")
  if [ "$runtimes" = '{}' ]; then runtimes="{$crun_json}"; else runtimes="${runtimes%\}},$crun_json}"; fi
fi
if [ "$runtimes" != '{}' ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$(dirname "$daemon_json")"
  if [ ! -s "$daemon_json" ]; then
    new=$(printf '{"runtimes":%s}' "$runtimes")
  elif command -v jq >/dev/null; then
    new=$(jq -c --argjson rt "$runtimes" '.runtimes = ((.runtimes // {}) + $rt)' "$daemon_json")
  else
    new=$(cat "$daemon_json")
    grep -q '"runsc"' "$daemon_json" || log "$daemon_json exists and jq is missing: add the runtimes $runtimes yourself"
  fi
  if [ "$new" != "$(cat "$daemon_json" 2>/dev/null)" ]; then
    log "registering the runtimes $runtimes with Docker"
    printf '%s\n' "$new" >"$daemon_json.tmp" && mv "$daemon_json.tmp" "$daemon_json"
    pid=$(cat "$run_dir/docker.pid" 2>/dev/null || pidof dockerd || true)
    [ -n "$pid" ] && kill -HUP "$pid"
    for _ in $(seq 1 50); do docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -qF "\"${runsc_bin:-runsc}\"" && break; sleep 0.2; done
  fi
fi
