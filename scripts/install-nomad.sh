#!/usr/bin/env bash
# Builds the pinned HashiCorp Nomad from the Go module proxy into a cache directory and
# prints the variable the Nomad tests and example read:
#
#   eval "$(scripts/install-nomad.sh)" && export NOMAD_BIN
#   go test ./adapters/nomad/...   # the real-cluster tests now run instead of skipping
#
# Only that line goes to stdout; progress goes to stderr.
#
# Nomad 1.6.3 is the last MPL-2.0 release the module proxy serves (later lines are
# BUSL). `go install` cannot build it: its go.mod replaces nomad/api with ./api, which
# is not in the module zip. So the script downloads the module and the api module at
# the same commit (as a pseudo-version), puts api where the replace points, and builds
# with -mod=mod. About 2.5 minutes on two cores from a cold Go build cache.
#
# Idempotent: a complete install is reused without touching the network. The build
# runs in a temporary directory and the binary is renamed into place; concurrent runs
# are serialised with flock.
#
# Environment:
#   NOMAD_VERSION  pinned Nomad version (default below)
#   SANDBOX_CACHE  cache root (default $HOME/.cache/agentsandbox)
set -euo pipefail

NOMAD_VERSION=${NOMAD_VERSION:-1.6.3}
cache=${SANDBOX_CACHE:-${HOME:-/root}/.cache/agentsandbox}
dir="$cache/nomad-$NOMAD_VERSION"
bin="$dir/nomad"

log() { echo "install-nomad: $*" >&2; }

complete() {
  [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "^Nomad v$NOMAD_VERSION\$"
}

if ! complete; then
  command -v go >/dev/null 2>&1 || { log "the go command is needed"; exit 1; }
  mkdir -p "$cache"
  exec 9>"$cache/.nomad-install.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
fi

if ! complete; then
  start=$(date +%s)
  # What a run killed half-way left (under the lock: no other run builds now).
  for d in "$cache"/nomad-build.*; do
    if [ -d "$d" ]; then chmod -R u+w "$d" 2>/dev/null || true; rm -rf "$d"; fi
  done
  tmp=$(mktemp -d "$cache/nomad-build.XXXXXX")
  trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
  # go mod download needs a module to run in; an empty one will do.
  (cd "$tmp" && go mod init nomadbuild >/dev/null 2>&1)
  field() { sed -n "s/.*\"$1\": \"\\(.*\\)\".*/\\1/p" | head -n 1; }
  log "downloading github.com/hashicorp/nomad@v$NOMAD_VERSION"
  info=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/nomad@v$NOMAD_VERSION")
  src=$(field Dir <<<"$info")
  hash=$(field Hash <<<"$info")
  when=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info <<<"$info")")
  [ -n "$src" ] && [ -n "$hash" ] && [ -n "$when" ] || { log "unexpected module info: $info"; exit 1; }
  # The api module at the same commit, as the pseudo-version the proxy serves
  # (the proxy refuses a bare commit hash for it).
  pseudo="v0.0.0-$(date -u -d "$when" +%Y%m%d%H%M%S)-${hash:0:12}"
  log "downloading github.com/hashicorp/nomad/api@$pseudo"
  apiinfo=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/nomad/api@$pseudo")
  apisrc=$(field Dir <<<"$apiinfo")
  [ -n "$apisrc" ] || { log "unexpected module info: $apiinfo"; exit 1; }
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  rm -rf "$tmp/src/api"
  cp -r "$apisrc" "$tmp/src/api"
  chmod -R u+w "$tmp/src/api"
  log "building nomad v$NOMAD_VERSION (a few minutes)"
  (cd "$tmp/src" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags=-s -o "$tmp/nomad" .) >&2
  mkdir -p "$dir"
  mv "$tmp/nomad" "$bin.tmp.$$" && mv "$bin.tmp.$$" "$bin"
  complete || { log "the built binary does not report v$NOMAD_VERSION: $("$bin" version 2>&1 | head -n 1)"; exit 1; }
  log "built in $(($(date +%s) - start)) s"
fi

printf 'NOMAD_BIN=%q\n' "$bin"
