#!/usr/bin/env bash
# Removes the images the test suite built, so the next test run builds them from
# nothing: in Docker, the images labelled dev.agentsandbox.test-image
# (agentimage.TestImageLabel: sandboxtest's probe and the project's test images); in
# containerd, the images of the suite's own namespace (agentsandbox-test). Images that
# users built with agentimage, and every other namespace, are left alone.
set -euo pipefail

ids=$(docker images -q --filter label=dev.agentsandbox.test-image 2>/dev/null | sort -u)
if [ -n "$ids" ]; then
  # shellcheck disable=SC2086
  docker rmi -f $ids >/dev/null 2>&1 || true
fi

addr=${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}
ns=agentsandbox-test
imgs=$(ctr --address "$addr" -n "$ns" images ls -q 2>/dev/null || true)
if [ -n "$imgs" ]; then
  # shellcheck disable=SC2086
  ctr --address "$addr" -n "$ns" images rm $imgs >/dev/null 2>&1 || true
fi
echo "remove-images: the test suite's images are gone from Docker and containerd ($ns)" >&2
