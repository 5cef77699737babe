# A run's own directory under /tmp, and the removal of those that killed runs left behind
# (a killed run cannot remove its own: gigabytes of caches in the new-machine mode).
#
#   rundir_make PREFIX   make /tmp/PREFIX.XXXXXX (mode 0711: the sandbox's uid traverses
#                        to sockets in it) owned by this shell's process; print its path
#   rundir_sweep PREFIX  remove the /tmp/PREFIX.* directories whose owner process has ended
#   rundir_remove DIR    remove DIR, never crossing into a mount a killed test left in it

# _rundir_started PID: the process's start time (field 22 of its stat), or nothing.
_rundir_started() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

rundir_make() {
  local d
  d=$(mktemp -d "/tmp/$1.XXXXXX") || return 1
  chmod 711 "$d"
  echo "$$ $(_rundir_started $$)" >"$d/.owner"
  echo "$d"
}

rundir_remove() {
  # Go's module cache is read-only.
  find "$1" -xdev -type d ! -perm -u+w -exec chmod u+w {} + 2>/dev/null || true
  rm -rf --one-file-system "$1" 2>/dev/null || echo "could not remove all of $1 (a mount in it?)" >&2
}

rundir_sweep() {
  local d pid start
  for d in "/tmp/$1".*; do
    [ -f "$d/.owner" ] || continue
    read -r pid start <"$d/.owner" || continue
    [ "$(_rundir_started "$pid")" = "$start" ] && continue
    echo "removing $d, left by a run that was killed" >&2
    rundir_remove "$d"
  done
}
