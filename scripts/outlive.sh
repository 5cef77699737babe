#!/usr/bin/env bash
# Nothing a test run started may outlive it. scripts/test.sh runs `go test` inside a
# cgroup of its own and checks, once it has ended:
#   - processes: every process still in that cgroup (nginx workers whose master died,
#     a daemon a test started and never stopped, a crash child);
#   - mounts: mount points that appeared during the run under the run's directories
#     (its TMPDIR, the checkout) or a dead test owner's pool slots;
#   - containers: Docker and containerd containers that appeared during the run and
#     whose owner label is a test owner (testenv.Owner) whose process has ended.
# What it finds is reported, then removed, so the next run starts clean.
#
#   outlive.sh begin STATE             create the cgroup, record mounts and containers
#   outlive.sh enter STATE             move the calling shell ($PPID's child) in: use
#                                      `outlive.sh enter STATE $BASHPID` from a subshell
#   outlive.sh check STATE DIR...      report and remove what outlived the run
set -uo pipefail

label=dev.agentsandbox.owner
ctr_addr=${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}

cgroup_root() {
  if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
    echo /sys/fs/cgroup/unified
  elif [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    echo "/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)"
  fi
}

docker_ids() { docker ps -aq --no-trunc --filter "label=$label" 2>/dev/null | sort; }
ctr_ids() {
  local ns
  for ns in $(ctr --address "$ctr_addr" namespaces ls -q 2>/dev/null | grep '^agentsandbox'); do
    ctr --address "$ctr_addr" -n "$ns" containers ls -q 2>/dev/null | sed "s|^|$ns/|"
  done | sort
}
mounts() { awk '{print $5}' /proc/self/mountinfo | sort -u; }

# dead_owner OWNER: the owner is a test's (…-tPID-START) and that process is gone.
dead_owner() {
  [[ $1 =~ -t([0-9]+)-([0-9]+)$ ]] || return 1
  local pid=${BASH_REMATCH[1]} start=${BASH_REMATCH[2]} now
  now=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $20}')
  [ "$now" != "$start" ]
}

case "${1:-}" in
begin)
  state=$2
  mkdir -p "$state"
  root=$(cgroup_root)
  if [ -n "$root" ] && mkdir "$root/agentsandbox-test.$$" 2>/dev/null; then
    echo "$root/agentsandbox-test.$$" >"$state/cgroup"
  else
    echo "outlive: no cgroup2 hierarchy to follow the run's processes in; processes are not checked" >&2
    : >"$state/cgroup"
  fi
  mounts >"$state/mounts"
  docker_ids >"$state/docker"
  ctr_ids >"$state/ctr"
  ;;
enter)
  cg=$(cat "$2/cgroup")
  [ -n "$cg" ] && echo "$3" >"$cg/cgroup.procs"
  ;;
check)
  state=$2
  shift 2
  bad=0
  cg=$(cat "$state/cgroup")
  if [ -n "$cg" ]; then
    left=
    for _ in $(seq 1 50); do # processes that are exiting get 5 s
      left=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      [ -z "$left" ] && break
      sleep 0.1
    done
    for pid in $left; do
      echo "outlive: process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)) in $(readlink "/proc/$pid/cwd" 2>/dev/null) outlived the test run"
      bad=1
    done
    [ -n "$left" ] && kill -9 $left 2>/dev/null
    sleep 0.2
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
  fi
  for m in $(comm -13 "$state/mounts" <(mounts)); do
    hit=
    for d in "$@"; do [[ $m == "$d"/* || $m == "$d" ]] && hit=1; done
    # The pools' default slot directory is shared: only a dead test owner's counts
    # (<pool dir>/<namespace or runtime>/<owner>/...).
    if [[ $m =~ ^/run/agentsandbox/pool/[^/]+/([^/]+)/ ]] && dead_owner "${BASH_REMATCH[1]}"; then hit=1; fi
    if [ -n "$hit" ]; then
      echo "outlive: mount $m appeared during the test run and is still there"
      umount -l "$m" 2>/dev/null
      bad=1
    fi
  done
  for id in $(comm -13 "$state/docker" <(docker_ids)); do
    owner=$(docker inspect -f "{{index .Config.Labels \"$label\"}}" "$id" 2>/dev/null) || continue
    if dead_owner "$owner"; then
      echo "outlive: Docker container ${id:0:12} of the test owner $owner outlived its test process"
      docker rm -f -v "$id" >/dev/null 2>&1
      bad=1
    fi
  done
  for nsid in $(comm -13 "$state/ctr" <(ctr_ids)); do
    ns=${nsid%%/*} id=${nsid#*/}
    owner=$(ctr --address "$ctr_addr" -n "$ns" containers info "$id" 2>/dev/null | jq -r ".Labels[\"$label\"] // empty") || continue
    if dead_owner "$owner"; then
      echo "outlive: containerd container $ns/$id of the test owner $owner outlived its test process"
      bad=1
    fi
  done
  exit $bad
  ;;
*)
  echo "usage: $0 begin STATE | enter STATE PID | check STATE DIR..." >&2
  exit 2
  ;;
esac
