#!/usr/bin/env bash
# Installs and starts what the library's real-runtime tests and examples need on a Debian
# machine: Docker Engine, containerd, nginx (for config checks), git (the git relay and its
# tests), and Go's tools.
# Idempotent: installed packages and running daemons are left as they are.
set -euo pipefail

log() { printf '[setup] %s\n' "$*" >&2; }

need_pkgs=()
for p in docker.io containerd nginx-light socat iproute2 git; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  if [ "$(id -u)" != 0 ]; then
    log "missing packages ${need_pkgs[*]} and not root: install them first"; exit 1
  fi
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

run_dir=${SANDBOX_RUN_DIR:-/var/run}
log_dir=${SANDBOX_LOG_DIR:-/var/log/agentsandbox}
mkdir -p "$log_dir"

wait_for() { # socket, what, seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    [ -S "$1" ] && return 0
    sleep 0.1
  done
  log "$2 did not create $1 in $3 s; last log lines:"; tail -n 20 "$log_dir/$2.log" >&2 || true
  return 1
}

# containerd: dockerd uses it, and the containerd adapter talks to it directly.
if ! ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
  log "starting containerd"
  nohup containerd >"$log_dir/containerd.log" 2>&1 &
  wait_for /run/containerd/containerd.sock containerd 30
fi

# dockerd without iptables or masquerading: no container it starts can route off the
# machine even by mistake. Sandboxes use network=none regardless.
if ! docker version >/dev/null 2>&1; then
  log "starting dockerd"
  nohup dockerd --containerd=/run/containerd/containerd.sock --iptables=false --ip-masq=false \
    >"$log_dir/dockerd.log" 2>&1 &
  wait_for "$run_dir/docker.sock" dockerd 60
  for _ in $(seq 1 100); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
fi
docker version --format 'docker engine {{.Server.Version}} (API {{.Server.APIVersion}})' >&2
