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

# shellcheck source=lib/pkg.sh
. "$(dirname "$0")/lib/pkg.sh"
# The package's service does not start during the install (pkg.sh forbids it).
pkg_install docker-registry apache2-utils
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled docker-registry >/dev/null 2>&1; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
echo "REGISTRY_BIN=$(command -v docker-registry || echo /usr/bin/docker-registry)"
