#!/usr/bin/env bash
# Runs a command as it would run on a new machine, on a machine that has everything:
#
#   SANDBOX_FRESH=1 make demo     # or make test, make bench: the Makefile calls this
#   bash scripts/fresh.sh CMD...  # the same for any command
#
# What a new contributor's first run pays for is hidden on a used machine: the installs
# find their packages, the builds find Go's caches. Under this script they do not:
#   - Go's build and module caches, npm's cache, the project's cache (SANDBOX_CACHE: Node,
#     OpenClaw, Nomad, Kubernetes, the bridge) and XDG_CACHE_HOME start empty, in a
#     directory of this run, removed at its end;
#   - every Debian package a script asks for is installed again (apt-get install
#     --reinstall, downloaded again, after one update of the lists), through the same
#     helper and with the same lock as a real install (scripts/lib/pkg.sh); services are
#     neither started nor stopped, so the running daemons are not disturbed;
#   - gVisor's runsc is built again from the empty caches (scripts/install-runsc.sh) and
#     put in place of the installed one (the same version; a rename, so a runsc that is
#     running keeps its file). Its install root stays the machine's: Docker and the
#     containerd wrapper are registered with that path, which every sandbox on the machine
#     uses, and a root removed with this run would leave them pointing at nothing.
# Run it before any change to scripts/ is submitted: CI runs on a machine where the
# packages are installed, so a missing install step passes there.
#
# Environment it sets: SANDBOX_FRESH_DIR (the run's directory; the scripts' sign that
# they run fresh), SANDBOX_PKG_RUN, GOCACHE, GOMODCACHE, npm_config_cache, SANDBOX_CACHE, XDG_CACHE_HOME.
set -euo pipefail

(($#)) || { echo "usage: $0 COMMAND..." >&2; exit 2; }
# Already fresh (a script that re-executes itself under this one, make's recursion).
if [ -n "${SANDBOX_FRESH_DIR:-}" ]; then exec "$@"; fi

log() { echo "fresh: $*" >&2; }
# shellcheck source=lib/rundir.sh
. "$(dirname "$0")/lib/rundir.sh"

rundir_sweep asbf
dir=$(rundir_make asbf)
trap 'rundir_remove "$dir"' EXIT
mkdir -p "$dir/go-build" "$dir/go-mod" "$dir/npm" "$dir/cache" "$dir/xdg"
export SANDBOX_FRESH_DIR=$dir GOCACHE=$dir/go-build GOMODCACHE=$dir/go-mod \
  npm_config_cache=$dir/npm SANDBOX_CACHE=$dir/cache XDG_CACHE_HOME=$dir/xdg
# The whole command is one package run (scripts/lib/pkg.sh): a new machine updates its
# lists once and installs a package once, however many scripts ask for it.
export SANDBOX_PKG_RUN="fresh.${dir##*.}.$$"
log "as on a new machine: empty caches in $dir, every package installed again"
start=$(date +%s)
rc=0
"$@" || rc=$?
log "$* took $(($(date +%s) - start)) s (exit $rc)"
exit "$rc"
