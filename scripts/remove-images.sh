#!/usr/bin/env bash
# Removes the project's own images, so the next test run builds them from nothing:
# in Docker, the images labelled dev.agentsandbox.image (every image agentimage builds)
# or named agentsandbox/*; in
# containerd, every image in the project's namespaces (agentsandbox*). Nothing else
# is touched.
set -euo pipefail

ids=$( { docker images -q --filter label=dev.agentsandbox.image;
  docker images -q --filter 'reference=agentsandbox/*'; } 2>/dev/null | sort -u)
if [ -n "$ids" ]; then
  # shellcheck disable=SC2086
  docker rmi -f $ids >/dev/null 2>&1 || true
fi

addr=${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}
for ns in $(ctr --address "$addr" namespaces ls -q 2>/dev/null | grep '^agentsandbox' || true); do
  imgs=$(ctr --address "$addr" -n "$ns" images ls -q 2>/dev/null || true)
  if [ -n "$imgs" ]; then
    # shellcheck disable=SC2086
    ctr --address "$addr" -n "$ns" images rm $imgs >/dev/null 2>&1 || true
  fi
done
echo "remove-images: the project's images are gone from Docker and containerd" >&2
