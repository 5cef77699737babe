#!/usr/bin/env bash
# A tripwire on the host's sensitive files: the test suite runs as root and plants
# hostile links in workspaces, so a test that writes through one could replace a system
# file. scripts/test.sh records the files before `go test` and checks them after; a
# change fails the run and names the file.
#
#   tripwire.sh record STATE   digest every listed path into STATE
#   tripwire.sh check STATE    compare; print each changed path; exit 1 if any changed
#   tripwire.sh list           print the paths watched
#
# Environment:
#   SANDBOX_TRIPWIRE_FILES  colon-separated paths that replace the default list (tests)
#   SANDBOX_TRIPWIRE_EXTRA  colon-separated paths added to the list
set -euo pipefail

default_files=(
  /etc/passwd /etc/shadow /etc/group /etc/gshadow /etc/sudoers /etc/sudoers.d
  /etc/hosts /etc/environment /etc/profile /etc/ld.so.preload /etc/crontab /etc/gitconfig
  /root/.gitconfig /root/.ssh /root/.bashrc /root/.profile
  /etc/docker/daemon.json /etc/containerd/config.toml /etc/nginx
  /usr/local/bin/runsc-sandbox
)

paths() {
  local list=()
  if [ -n "${SANDBOX_TRIPWIRE_FILES:-}" ]; then
    IFS=: read -r -a list <<<"$SANDBOX_TRIPWIRE_FILES"
  else
    list=("${default_files[@]}")
  fi
  if [ -n "${SANDBOX_TRIPWIRE_EXTRA:-}" ]; then
    local extra=()
    IFS=: read -r -a extra <<<"$SANDBOX_TRIPWIRE_EXTRA"
    list+=("${extra[@]}")
  fi
  printf '%s\n' "${list[@]}"
}

# digest prints one line for a path: what it is and its content's hash, without
# following a link (a link is itself the change to catch).
digest() {
  local p=$1
  if [ -L "$p" ]; then
    printf '%s\tlink %s\n' "$p" "$(readlink "$p")"
  elif [ -d "$p" ]; then
    local sum
    sum=$(cd "$p" && find . -xdev \( -type f -printf '%p %m %U %G ' -exec sha256sum {} \; \) -o \( ! -type f -printf '%p %y %m %U %G %l\n' \) 2>/dev/null | LC_ALL=C sort | sha256sum | cut -d' ' -f1)
    printf '%s\tdir %s\n' "$p" "$sum"
  elif [ -e "$p" ]; then
    printf '%s\tfile %s %s\n' "$p" "$(stat -c '%a %u %g' "$p")" "$(sha256sum <"$p" | cut -d' ' -f1)"
  else
    printf '%s\tabsent\n' "$p"
  fi
}

snapshot() {
  local p
  while IFS= read -r p; do
    [ -n "$p" ] && digest "$p"
  done < <(paths)
}

case "${1:-}" in
record)
  [ -n "${2:-}" ] || { echo "usage: $0 record STATE" >&2; exit 2; }
  snapshot >"$2"
  ;;
check)
  [ -n "${2:-}" ] && [ -f "$2" ] || { echo "usage: $0 check STATE (recorded first)" >&2; exit 2; }
  changed=0
  while IFS=$'\t' read -r p was; do
    now=$(digest "$p" | cut -f2-)
    if [ "$now" != "$was" ]; then
      echo "tripwire: $p changed during the test run (was: $was; now: $now)"
      changed=1
    fi
  done <"$2"
  exit $changed
  ;;
list) paths ;;
*)
  echo "usage: $0 record|check STATE | list" >&2
  exit 2
  ;;
esac
