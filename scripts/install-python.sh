#!/usr/bin/env bash
# Installs what the Python agent image tests need on a bare Debian machine: Debian's
# python3 (the interpreter agentimage.Python packs by default) and python3-yaml (a
# Debian package with a C extension, whose closure the builder must find). Idempotent:
# installed packages are left alone.
set -euo pipefail
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
[ -f /usr/lib/python3/dist-packages/yaml/__init__.py ] || need+=(python3-yaml)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-python: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >&2 || { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi
