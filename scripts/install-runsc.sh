#!/usr/bin/env bash
# Builds gVisor's runsc at a pinned version from the Go module proxy (gVisor publishes
# a go-buildable branch as the module gvisor.dev/gvisor) and installs it under
# /usr/local/lib/agentsandbox/runsc/<version>/runsc. Prints that path on stdout; progress
# goes to stderr.
#
# Why not Debian's runsc: bookworm ships gVisor 20221219, whose /proc has no
# /proc/self/limits and no NoNewPrivs or CapAmb lines in /proc/self/status, so the
# runner conformance suite cannot see the limits it checks. Releases from 2023 on have
# them, and run without KVM on the systrap platform (the default) instead of ptrace.
#
# Idempotent: an installed version is reused without touching the network or the Go
# toolchain. The build goes to a temporary directory and is renamed into place; flock
# serialises concurrent runs. Go's build and module caches make a rebuild cheap; from
# empty caches the build takes one to three minutes on two cores.
#
# In the new-machine mode (scripts/fresh.sh) the installed version is built again, once
# per run, from the run's empty Go caches, and renamed over the installed binary.
#
# Environment:
#   GVISOR_VERSION      the module version to build (default below: a pseudo-version
#                       of gVisor's go branch)
#   SANDBOX_RUNSC_ROOT  install root (default /usr/local/lib/agentsandbox/runsc)
set -euo pipefail

GVISOR_VERSION=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
root=${SANDBOX_RUNSC_ROOT:-/usr/local/lib/agentsandbox/runsc}
dir="$root/$GVISOR_VERSION"
bin="$dir/runsc"

log() { echo "install-runsc: $*" >&2; }

case "$GVISOR_VERSION" in
  v[0-9]*) ;;
  *) log "GVISOR_VERSION $GVISOR_VERSION is not a module version"; exit 2 ;;
esac
case "$GVISOR_VERSION" in
  */* | *..* | *' '*) log "GVISOR_VERSION $GVISOR_VERSION is not a module version"; exit 2 ;;
esac

installed() {
  [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1 || return 1
  # The new-machine mode builds once per run, as if nothing were installed.
  [ -z "${SANDBOX_FRESH_DIR:-}" ] || [ -e "$SANDBOX_FRESH_DIR/runsc-built" ]
}

if installed; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { log "go is missing: it builds runsc"; exit 1; }
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if installed; then
  echo "$bin"
  exit 0
fi

# A build directory here now was left by a killed run (the lock is ours).
rm -rf "$root"/.build.*
tmp=$(mktemp -d "$root/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "building gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
start=$(date +%s)
# From the temporary directory: go install pkg@version ignores any go.mod around it.
(cd "$tmp" && GOBIN="$tmp/bin" CGO_ENABLED=0 GOTOOLCHAIN=local go install -trimpath "gvisor.dev/gvisor/runsc@$GVISOR_VERSION") >&2
"$tmp/bin/runsc" --version >/dev/null
chmod 755 "$tmp/bin/runsc"
if [ -d "$dir" ]; then
  # A binary in use (by the runtimes registered with it) is replaced by a rename: a runsc
  # that is running keeps its file, the next one starts the new one.
  mv "$tmp/bin/runsc" "$bin"
else
  mkdir -p "$tmp/out"
  mv "$tmp/bin/runsc" "$tmp/out/runsc"
  mv "$tmp/out" "$dir"
fi
if [ -n "${SANDBOX_FRESH_DIR:-}" ]; then touch "$SANDBOX_FRESH_DIR/runsc-built"; fi
log "built in $(($(date +%s) - start)) s: $bin"
echo "$bin"
