#!/usr/bin/env bash
# The whole test suite, against the real parts: installs and starts what is missing
# (scripts/setup.sh), then runs every test with those parts required, so a missing
# daemon fails the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
if [ -x scripts/install-openclaw.sh ]; then
  eval "$(bash scripts/install-openclaw.sh)"
  export OPENCLAW_BIN NODE24_BIN OPENCLAW_DIR
fi
export SANDBOX_REQUIRE=${SANDBOX_REQUIRE:-all}

echo "== go vet"
go vet ./...
echo "== go test (SANDBOX_REQUIRE=$SANDBOX_REQUIRE)"
# The verbose log is kept whole; what is printed is the summary, the failures and a
# count that shows no test was skipped.
TEST_LOG=${TEST_LOG:-.cache/test.log}
mkdir -p "$(dirname "$TEST_LOG")"
go test -count=1 -timeout 45m -v "$@" ./... >"$TEST_LOG" 2>&1 && rc=0 || rc=$?
grep -E "^(ok|FAIL|---|panic)|^\s+--- (FAIL|SKIP)" "$TEST_LOG" | grep -v -- "--- PASS" || true
passes=$(grep -c -- "--- PASS" "$TEST_LOG" || true)
fails=$(grep -c -- "--- FAIL" "$TEST_LOG" || true)
skips=$(grep -c -- "--- SKIP" "$TEST_LOG" || true)
if [ "$rc" != 0 ]; then
  echo "== failures (the whole log is $TEST_LOG)"
  grep -B 5 -A 40 -E -- "--- FAIL|^panic:|^FAIL" "$TEST_LOG" | head -n 400 || true
fi
echo "tests: ${passes} passed, ${fails} failed, ${skips} skipped"
if [ "$SANDBOX_REQUIRE" = all ] && [ "$skips" != 0 ]; then echo "a test skipped with every part required"; exit 1; fi
exit $rc
