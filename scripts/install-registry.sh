#!/usr/bin/env bash
# Installs what the registry tests need on a bare Debian machine: Debian's
# `docker-registry` (the CNCF distribution registry, 2.8) and `htpasswd` (apache2-utils)
# for its basic authentication. It only installs: the tests start their own registry
# process on a free loopback port with their own storage directory and config, and stop
# it. Debian's package enables a system service on install; this script stops and
# disables it, so nothing listens on port 5000 that the tests did not start.
#
# Idempotent: installed packages are left alone. Prints REGISTRY_BIN=<path>.
set -euo pipefail

log() { echo "install-registry: $*" >&2; }

need=()
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d keeps the package's service from starting during the install.
  restore=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    restore=1
  fi
  apt-get install -y --no-install-recommends "${need[@]}" >&2 || { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
  [ -n "$restore" ] && rm -f /usr/sbin/policy-rc.d
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled docker-registry >/dev/null 2>&1; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
echo "REGISTRY_BIN=$(command -v docker-registry || echo /usr/bin/docker-registry)"
