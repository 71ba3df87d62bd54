#!/bin/bash
# Stop a cluster started by start.sh DIR and remove DIR. Safe to run twice, and
# while start.sh is still starting the cluster.
# Usage: stop.sh DIR
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
[ $# -eq 1 ] || { echo "usage: stop.sh DIR" >&2; exit 2; }
D=$1
[ -d "$D" ] || { echo "nothing to stop in $D"; exit 0; }

targets=()
# The whole process group of start.sh (see there), unless we are part of it:
# start.sh calls this script itself when it fails.
if [ -f "$D/pgid" ]; then
  read -r -a STAT </proc/$$/stat
  pgid=$(cat "$D/pgid")
  [ "$pgid" != "${STAT[4]}" ] && targets+=("-$pgid")
fi
for n in rgw osd0 mon; do
  f=$D/pids/$n
  [ -f "$f" ] && targets+=("$(cat "$f")")
done
[ ${#targets[@]} -gt 0 ] && kill_all "${targets[@]}"
release_ports "$D"
rm -rf "$D"
echo stopped
