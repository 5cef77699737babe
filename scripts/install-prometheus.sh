#!/usr/bin/env bash
# Installs Debian's prometheus (2.42 on bookworm) for the daemon's metrics test
# (integration/proxyd_metrics_test.go), which starts its own prometheus process on
# loopback with a configuration and data directory of its own. The packaged service
# is not needed: it is stopped and disabled where a service manager exists.
# Idempotent; prints the binary's path.
set -euo pipefail

# The package's maintainer scripts start no service (pkg.sh forbids it during installs):
# there is no init in CI containers, and where there is one the test wants no second scraper.
# shellcheck source=lib/pkg.sh
. "$(dirname "$0")/lib/pkg.sh"
pkg_install prometheus
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
command -v prometheus
