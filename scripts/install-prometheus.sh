#!/usr/bin/env bash
# Installs Debian's prometheus (2.42 on bookworm) for the daemon's metrics test
# (integration/proxyd_metrics_test.go), which starts its own prometheus process on
# loopback with a configuration and data directory of its own. The packaged service
# is not needed: it is stopped and disabled where a service manager exists.
# Idempotent; prints the binary's path.
set -euo pipefail

if ! command -v prometheus >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	# Keep the package's maintainer scripts from starting the service (no init here
	# in CI containers; where there is one, the test does not want a second scraper).
	policy=/usr/sbin/policy-rc.d
	made_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		made_policy=1
	fi
	trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
	apt-get install -y --no-install-recommends prometheus >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; }
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
command -v prometheus
