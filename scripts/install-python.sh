#!/usr/bin/env bash
# Installs what the Python agent image tests need on a bare Debian machine: Debian's
# python3 (the interpreter agentimage.Python packs by default) and python3-yaml (a
# Debian package with a C extension, whose closure the builder must find). Idempotent:
# installed packages are left alone.
set -euo pipefail
# shellcheck source=lib/pkg.sh
. "$(dirname "$0")/lib/pkg.sh"
pkg_install python3 python3-yaml
