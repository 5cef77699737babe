#!/usr/bin/env bash
# The whole test suite, against the real parts: installs and starts what is missing
# (scripts/setup.sh), then runs every test with those parts required, so a missing
# daemon fails the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
if [ -x scripts/install-openclaw.sh ]; then
  eval "$(bash scripts/install-openclaw.sh)"
  export OPENCLAW_BIN NODE24_BIN
fi
export SANDBOX_REQUIRE=${SANDBOX_REQUIRE:-all}

echo "== go vet"
go vet ./...
echo "== go test (SANDBOX_REQUIRE=$SANDBOX_REQUIRE)"
go test -count=1 -timeout 45m "$@" ./...
