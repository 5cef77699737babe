#!/usr/bin/env bash
# Builds a pinned Kubernetes control plane, kubelet and etcd from the Go module proxy into a
# cache directory and prints the variables the Kubernetes tests read:
#
#   eval "$(scripts/install-kubernetes.sh)" && export KUBE_BIN_DIR KUBE_VERSION
#   go test ./adapters/kubernetes/...   # the real-cluster tests now run instead of skipping
#
# It also installs Debian's containernetworking-plugins (through scripts/lib/pkg.sh).
#
# Only KEY=VALUE lines go to stdout; progress goes to stderr.
#
# Kubernetes 1.36 is the last line that supports containerd 1.x (Debian ships 1.6). The
# module k8s.io/kubernetes replaces its 31 staging modules with ./staging/..., which the
# module zip lacks, so the script downloads the module, points every staging replace at the
# published v0.<minor>.<patch> instead, and builds with -mod=mod. etcd is built from the
# go.etcd.io/etcd/server/v3 version Kubernetes itself pins (a three-line main calling
# etcdmain.Main), so no second module graph is needed.
#
# Cost on two cores: about 4-4.5 minutes from a cold Go build cache (kube-apiserver is most of
# it) plus ~620 MB of module downloads; about 15-30 s with a warm cache. Disk: ~3.2 GB of build
# cache, ~350 MB of binaries.
#
# Idempotent: a complete install (every binary present and the version stamp matching) is
# reused without touching the network. The build runs in a temporary directory and the
# directory is renamed into place; concurrent runs are serialised with flock.
#
# Environment:
#   KUBE_VERSION   pinned Kubernetes version (default below)
#   SANDBOX_CACHE  cache root (default $HOME/.cache/agentsandbox)
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
# This script prints KUBE_VERSION with a "v" (as Kubernetes names its releases); a
# caller that exported what it printed may hand it back.
KUBE_VERSION=${KUBE_VERSION#v}
[[ $KUBE_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "install-kubernetes: KUBE_VERSION must be MAJOR.MINOR.PATCH, got '$KUBE_VERSION'" >&2; exit 2; }
cache=${SANDBOX_CACHE:-${HOME:-/root}/.cache/agentsandbox}
dir="$cache/kubernetes-$KUBE_VERSION"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd)

log() { echo "install-kubernetes: $*" >&2; }
# shellcheck source=lib/pkg.sh
. "$(dirname "$0")/lib/pkg.sh"

complete() {
  [ -f "$dir/VERSION" ] && [ "$(cat "$dir/VERSION")" = "v$KUBE_VERSION" ] || return 1
  local b
  for b in "${bins[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

# The test cluster's CNI plugins (bridge, host-local, loopback) come from Debian; containerd
# and its runc shim are installed by scripts/setup.sh.
pkg_install_optional containernetworking-plugins

if ! complete; then
  command -v go >/dev/null 2>&1 || { log "the go command is needed"; exit 1; }
  mkdir -p "$cache"
  exec 9>"$cache/.kubernetes-install.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
fi

if ! complete; then
  start=$(date +%s)
  # What a run killed half-way left (under the lock: no other run builds now).
  for d in "$cache"/kubernetes-build.*; do
    if [ -d "$d" ]; then chmod -R u+w "$d" 2>/dev/null || true; rm -rf "$d"; fi
  done
  tmp=$(mktemp -d "$cache/kubernetes-build.XXXXXX")
  trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
  (cd "$tmp" && go mod init kubebuild >/dev/null 2>&1)
  field() { sed -n "s/.*\"$1\": \"\\(.*\\)\".*/\\1/p" | head -n 1; }
  log "downloading k8s.io/kubernetes@v$KUBE_VERSION"
  info=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION")
  src=$(field Dir <<<"$info")
  [ -n "$src" ] || { log "unexpected module info: $info"; exit 1; }
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  cd "$tmp/src"
  rm -f go.work go.work.sum
  # Staging modules are published as k8s.io/<name> v0.<minor>.<patch>.
  staging="v0.${KUBE_VERSION#*.}"
  args=()
  while read -r mod; do
    args+=("-replace=$mod=$mod@$staging")
  done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*|\1|p' go.mod | sort -u)
  [ "${#args[@]}" -gt 0 ] || { log "no staging replaces found"; exit 1; }
  go mod edit "${args[@]}"
  # etcd's server, at the version Kubernetes requires.
  mkdir -p cmd/sandbox-etcd
  cat > cmd/sandbox-etcd/main.go <<'GO'
// Command sandbox-etcd is etcd's server, built from the version Kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "downloading modules"
  GOFLAGS=-mod=mod go mod download >&2
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION")"
  out="$tmp/out"
  mkdir -p "$out"
  for b in kube-scheduler kubelet etcd kube-controller-manager kube-apiserver; do
    pkg="./cmd/$b"
    [ "$b" = etcd ] && pkg=./cmd/sandbox-etcd
    t=$(date +%s)
    log "building $b"
    CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "$ldflags" -o "$out/$b" "$pkg" >&2
    log "built $b in $(($(date +%s) - t)) s"
  done
  echo "v$KUBE_VERSION" >"$out/VERSION"
  cd "$cache"
  rm -rf "$dir.old"
  [ -e "$dir" ] && mv "$dir" "$dir.old"
  mv "$out" "$dir"
  rm -rf "$dir.old"
  complete || { log "install incomplete in $dir"; exit 1; }
  log "built in $(($(date +%s) - start)) s"
fi

printf 'KUBE_BIN_DIR=%q\n' "$dir"
printf 'KUBE_VERSION=%q\n' "v$KUBE_VERSION"
