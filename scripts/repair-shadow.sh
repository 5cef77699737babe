#!/usr/bin/env bash
# Earlier versions of the test suite could replace /etc/shadow with a hostile git config
# (a planted .git/config link written through as root). On such a machine this puts the
# previous shadow file back: Debian keeps it as /etc/shadow-, and it is restored only
# when it is a well-formed shadow file naming exactly the users of /etc/passwd.
# A well-formed /etc/shadow is left alone. Idempotent.
#
# SANDBOX_REPAIR_ETC replaces /etc (for the script's own test, on copies).
set -euo pipefail
etc=${SANDBOX_REPAIR_ETC:-/etc}

log() { printf '[repair-shadow] %s\n' "$*" >&2; }

wellformed() { # every line: name:hash:7 more fields
  [ -s "$1" ] && awk -F: 'NF != 9 || $1 !~ /^[A-Za-z0-9_][A-Za-z0-9_.-]*[$]?$/ { bad = 1 } END { exit bad }' "$1"
}
users() { cut -d: -f1 "$1" | LC_ALL=C sort; }

[ "$(id -u)" = 0 ] || exit 0
wellformed "$etc/shadow" && exit 0
if [ -f "$etc/shadow-" ] && wellformed "$etc/shadow-" && [ "$(users "$etc/shadow-")" = "$(users "$etc/passwd")" ]; then
  log "$etc/shadow is not a shadow file (an earlier test run wrote to it); restoring $etc/shadow-"
  cp "$etc/shadow" "$etc/shadow.damaged-by-tests"
  cp "$etc/shadow-" "$etc/shadow.new"
  chown --reference="$etc/shadow-" "$etc/shadow.new"
  chmod --reference="$etc/shadow-" "$etc/shadow.new"
  mv "$etc/shadow.new" "$etc/shadow"
else
  log "$etc/shadow is not a shadow file and $etc/shadow- cannot replace it: restore it by hand"
  exit 1
fi
