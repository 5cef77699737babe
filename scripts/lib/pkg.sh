# The one way the scripts install Debian packages (source it, then call pkg_install).
# A test (scripts_test.go in internal/testsupport/testenv) fails when any script calls
# apt-get or dpkg to install outside this file.
#
#   pkg_install PKG...           install the packages that are missing; fails if it cannot
#   pkg_install_optional PKG...  the same, but a failure is only reported (returns 0)
#   pkg_missing PKG...           print the packages that are not installed, one a line
#
# What it guarantees, which separate apt-get calls in each script did not:
#   - One install at a time. The scripts run side by side (scripts/test.sh builds Nomad
#     and Kubernetes while it installs the rest), and two apt-gets at once fail at once
#     on dpkg's lock. Installs are serialised with flock on a lock of their own, and
#     apt-get waits for dpkg's lock (DPkg::Lock::Timeout) when something else holds it.
#   - The package lists are updated at most once per run (a run is the outermost script
#     that sourced this file, or scripts/test.sh and scripts/fresh.sh for every script
#     they start: SANDBOX_PKG_RUN names it, and children inherit it), and
#     only when needed: when there are no lists at all, or when an install failed (stale
#     lists name package versions the mirror no longer has), then the install is retried.
#   - No service starts or stops during an install: a policy-rc.d that forbids them is in
#     place for the install's duration (an existing one is left as it is). The scripts
#     start the daemons they need themselves, with their own flags.
#   - A dpkg run that was interrupted (a killed install) is completed first.
#   - In the new-machine mode (scripts/fresh.sh sets SANDBOX_FRESH_DIR), every package
#     asked for is reinstalled as if it were missing, once per run, its files downloaded
#     again, and the lists updated once.
#
# Progress goes to stderr (scripts print KEY=VALUE lines on stdout).
#
# Environment:
#   SANDBOX_PKG_TIMEOUT  seconds to wait for another install to finish (default 900)
#   SANDBOX_PKG_ROOT     prefix of the system paths it uses (its own test)

_pkg_prefix=${SANDBOX_PKG_ROOT:-}
_pkg_state=$_pkg_prefix/run/lock/agentsandbox-pkg
_pkg_policy=$_pkg_prefix/usr/sbin/policy-rc.d
_pkg_lists=$_pkg_prefix/var/lib/apt/lists
_pkg_updates=$_pkg_prefix/var/lib/dpkg/updates
_pkg_marker='# agentsandbox: no service starts during an install (scripts/lib/pkg.sh)'
if [ -z "${SANDBOX_PKG_RUN:-}" ]; then
  SANDBOX_PKG_RUN="$$.$(date +%s%N)"
  export SANDBOX_PKG_RUN
fi

_pkg_log() { echo "pkg: $*" >&2; }

pkg_missing() {
  local p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || echo "$p"
  done
}

# _pkg_done KEY: whether KEY (update, or install:PKG) was recorded in this run.
_pkg_done() {
  [ "$(head -n 1 "$_pkg_state/run" 2>/dev/null)" = "$SANDBOX_PKG_RUN" ] && grep -qxF "$1" "$_pkg_state/run"
}
_pkg_record() {
  if [ "$(head -n 1 "$_pkg_state/run" 2>/dev/null)" != "$SANDBOX_PKG_RUN" ]; then
    echo "$SANDBOX_PKG_RUN" >"$_pkg_state/run"
  fi
  echo "$1" >>"$_pkg_state/run"
}

# _pkg_apt ARGS...: apt-get, waiting for dpkg's lock, never asking, keeping changed
# configuration files; its output is shown only when it fails.
_pkg_apt() {
  local out rc=0 opts=(-o "DPkg::Lock::Timeout=${SANDBOX_PKG_TIMEOUT:-900}"
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  if [ -n "${SANDBOX_FRESH_DIR:-}" ]; then
    mkdir -p "$SANDBOX_FRESH_DIR/apt-archives/partial"
    opts+=(-o "Dir::Cache::Archives=$SANDBOX_FRESH_DIR/apt-archives/")
  fi
  out=$(DEBIAN_FRONTEND=noninteractive apt-get -y -q "${opts[@]}" "$@" 2>&1) || rc=$?
  if [ "$rc" != 0 ]; then
    _pkg_log "apt-get $* failed ($rc):"
    tail -n 20 <<<"$out" >&2
  fi
  return "$rc"
}

_pkg_update() {
  _pkg_log "updating the package lists"
  _pkg_apt update || return 1
  _pkg_record update
}

# _pkg_run_install PKG...: under the lock; installs (or, in the new-machine mode,
# reinstalls) the packages not yet handled in this run.
_pkg_run_install() {
  local todo=() p reinstall=()
  for p in "$@"; do
    if [ -n "${SANDBOX_FRESH_DIR:-}" ]; then
      _pkg_done "install:$p" || todo+=("$p")
    elif dpkg -s "$p" >/dev/null 2>&1; then
      :
    else
      todo+=("$p")
    fi
  done
  ((${#todo[@]})) || return 0
  [ -n "${SANDBOX_FRESH_DIR:-}" ] && reinstall=(--reinstall)

  # A killed install leaves dpkg half-way; apt-get refuses to run until it is finished.
  if [ -n "$(ls -A "$_pkg_updates" 2>/dev/null)" ]; then
    _pkg_log "completing an interrupted dpkg run"
    DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold --configure -a >&2 || return 1
  fi
  # No lists at all (a minimal image), or the new-machine mode: update first.
  if ! _pkg_done update; then
    if [ -n "${SANDBOX_FRESH_DIR:-}" ] || ! compgen -G "$_pkg_lists/*_Packages*" >/dev/null; then
      _pkg_update || return 1
    fi
  fi

  # Services stay as they are: a policy-rc.d of ours forbids starts and stops for the
  # install's duration. One with our marker was left by a killed run: it is ours now.
  local made_policy=
  if [ ! -e "$_pkg_policy" ] || grep -qxF "$_pkg_marker" "$_pkg_policy" 2>/dev/null; then
    mkdir -p "$(dirname "$_pkg_policy")"
    printf '#!/bin/sh\n%s\nexit 101\n' "$_pkg_marker" >"$_pkg_policy"
    chmod 0755 "$_pkg_policy"
    made_policy=1
  fi
  local start rc=0
  start=$(date +%s)
  _pkg_log "installing ${reinstall[*]:+(again, as on a new machine) }${todo[*]}"
  if ! _pkg_apt install --no-install-recommends "${reinstall[@]}" "${todo[@]}"; then
    rc=1
    if ! _pkg_done update; then
      _pkg_log "retrying after updating the package lists"
      _pkg_update && _pkg_apt install --no-install-recommends "${reinstall[@]}" "${todo[@]}" && rc=0
    fi
  fi
  [ -n "$made_policy" ] && rm -f "$_pkg_policy"
  [ "$rc" = 0 ] || return 1
  for p in "${todo[@]}"; do _pkg_record "install:$p"; done
  _pkg_log "installed ${todo[*]} in $(($(date +%s) - start)) s"
}

pkg_install() {
  (($#)) || return 0
  # Nothing to do (outside the new-machine mode) needs neither root nor the lock.
  if [ -z "${SANDBOX_FRESH_DIR:-}" ] && [ -z "$(pkg_missing "$@")" ]; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    _pkg_log "missing Debian packages $(pkg_missing "$@" | paste -sd' ') and not root: install them first"
    return 1
  fi
  command -v apt-get >/dev/null 2>&1 || { _pkg_log "apt-get is missing: install $* yourself"; return 1; }
  mkdir -p "$_pkg_state"
  local fd rc=0
  exec {fd}>>"$_pkg_state/lock"
  if ! flock -w "${SANDBOX_PKG_TIMEOUT:-900}" "$fd"; then
    _pkg_log "another install held $_pkg_state/lock for ${SANDBOX_PKG_TIMEOUT:-900} s"
    exec {fd}>&-
    return 1
  fi
  _pkg_run_install "$@" || rc=$?
  exec {fd}>&-
  return "$rc"
}

pkg_install_optional() {
  pkg_install "$@" || _pkg_log "could not install $*; the tests that need them say so"
  return 0
}
