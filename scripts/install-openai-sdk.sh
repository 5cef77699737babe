#!/usr/bin/env bash
# Installs the pinned official OpenAI and Anthropic Node SDKs (the npm packages `openai`
# and `@anthropic-ai/sdk`) from the npm registry into a cache directory and prints
# OPENAI_SDK_DIR=<the node_modules parent>. The integration test that runs unmodified
# SDKs in a sandbox mounts that tree (and runs this script itself when the variable is
# not set).
#
# Idempotent: a complete install is reused without touching the network; the install
# is built in a temporary directory and renamed into place, serialised with flock.
#
# Environment:
#   OPENAI_SDK_VERSION     pinned openai version (default below)
#   ANTHROPIC_SDK_VERSION  pinned @anthropic-ai/sdk version (default below)
#   SANDBOX_CACHE       cache root (default $HOME/.cache/agentsandbox)
set -euo pipefail

OPENAI_SDK_VERSION=${OPENAI_SDK_VERSION:-7.57.0}
ANTHROPIC_SDK_VERSION=${ANTHROPIC_SDK_VERSION:-1.12.0}
cache=${SANDBOX_CACHE:-${HOME:-/root}/.cache/agentsandbox}
dir="$cache/llm-sdks-openai-$OPENAI_SDK_VERSION-anthropic-$ANTHROPIC_SDK_VERSION"
want="openai=$OPENAI_SDK_VERSION anthropic=$ANTHROPIC_SDK_VERSION"
stamp="$dir/.installed"

log() { echo "install-openai-sdk: $*" >&2; }

complete() {
  [ -f "$dir/node_modules/openai/package.json" ] && [ -f "$dir/node_modules/@anthropic-ai/sdk/package.json" ] &&
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]
}

if ! complete; then
  command -v npm >/dev/null || { log "npm is missing (scripts/install-openclaw.sh installs it)"; exit 1; }
  mkdir -p "$cache"
  exec 9>"$cache/.openai-sdk.lock"
  flock 9
  if ! complete; then
    log "installing $want"
    tmp=$(mktemp -d "$cache/.openai-sdk.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo '{"name":"agentsandbox-openai-sdk","private":true}' >"$tmp/package.json"
    npm install --prefix "$tmp" --no-audit --no-fund --ignore-scripts --loglevel=error \
      "openai@$OPENAI_SDK_VERSION" "@anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION" >&2
    # The sandbox user reads the tree through a read-only mount.
    chmod -R a+rX "$tmp"
    echo "$want" >"$tmp/.installed"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    trap - EXIT
  fi
fi
echo "OPENAI_SDK_DIR=$dir"
