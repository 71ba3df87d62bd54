#!/bin/bash
# Throwaway single-node Ceph cluster (one monitor, one memstore OSD, radosgw) on
# 127.0.0.1 only, as the S3 server for tests.
#
# Usage: start.sh [DIR]
#   DIR        data directory; must be empty or absent (default: a fresh
#              mktemp -d under ${TMPDIR:-/tmp}). stop.sh DIR removes it.
# Environment (every port defaults to a free one chosen at start):
#   RGW_PORT           radosgw's S3 port
#   MON_V2_PORT        the monitor's msgr2 port
#   MON_V1_PORT        the monitor's legacy msgr1 port
#   TIDEMARK_WATCH_PID if set, a detached watchdog runs stop.sh DIR as soon as
#                      that process exits (also when it is killed with SIGKILL)
# On success prints one line on stdout and returns, leaving the daemons running:
#   READY endpoint=http://127.0.0.1:PORT access=test secret=test dir=DIR startup=SECONDSs
# On failure prints the reason and the tail of the logs on stderr, stops what it
# started and exits 1.
# Needs: apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd curl
set -Eeuo pipefail
T0=$(date +%s.%N)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"

work_dir D rgw stop.sh "$@" || exit 1
mkdir -p "$D"/{mon,osd0,rgw,log,run,pids}

# When this script leads its own process group (as when the test setup spawns
# it detached), stop.sh kills the whole group: that also ends this script and
# any daemon it has just started if the runner dies in the middle of startup.
read -r -a STAT </proc/$$/stat
[ "${STAT[4]}" = "$$" ] && echo "$$" >"$D/pgid"

fail() {
  trap - ERR
  {
    echo "start.sh: $*"
    for f in "$D"/log/*; do
      [ -s "$f" ] || continue
      echo "--- tail of $f"; tail -n 15 "$f"
    done
  } >&2
  "$HERE/stop.sh" "$D" >/dev/null 2>&1 || true
  exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR

if [ -n "${TIDEMARK_WATCH_PID:-}" ]; then
  start_watchdog "$TIDEMARK_WATCH_PID" "$D" "$HERE/stop.sh"
fi

port() { # VAR: use $VAR when it is a port number, otherwise claim a free one
  local v=${!1:-0}
  if [ "$v" != 0 ]; then printf -v "$1" '%s' "$v"; else claim_port "$1" "$D"; fi
}
port RGW_PORT; port MON_V2_PORT; port MON_V1_PORT

FSID=$(cat /proc/sys/kernel/random/uuid)
CONF=$D/ceph.conf
cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc secure
mon warn on insecure global id reclaim allowed = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
paxos propose interval = 0.05
paxos min wait = 0.01
osd objectstore = memstore
memstore device bytes = 8589934592
run dir = $D/run
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
mon cluster log file = $D/log/cluster.log
crash dir = $D/crash
keyring = $D/keyring
[mon.a]
mon data = $D/mon
[osd.0]
osd data = $D/osd0
[client.rgw]
rgw data = $D/rgw
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw thread pool size = 64
EOF
export CEPH_CONF=$CONF

daemon() { # NAME CMD...: run CMD in the background, logging to log/NAME.out
  local n=$1; shift
  "$@" </dev/null >>"$D/log/$n.out" 2>&1 &
  echo $! >"$D/pids/$n"
}
running() { alive "$(cat "$D/pids/$1")" || fail "$1 exited during startup"; }
# A ceph CLI call waits up to 5 minutes for an unreachable monitor; bound it.
# --foreground keeps it in our process group, so that stop.sh can end it.
cli() { timeout --foreground 20 "$@"; }

# --- monitor ---
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$FSID" \
  --addv a "[v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]" "$D/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring" >>"$D/log/mkfs.out" 2>&1
daemon mon ceph-mon -c "$CONF" -f -i a
ok=
for _ in $(seq 100); do
  running mon
  timeout --foreground 5 ceph -c "$CONF" mon stat >/dev/null 2>&1 && { ok=1; break; }
  sleep 0.3
done
[ -n "$ok" ] || fail "monitor did not answer on 127.0.0.1:$MON_V2_PORT"

# --- OSD ---
UUID=$(cat /proc/sys/kernel/random/uuid)
ID=$(cli ceph -c "$CONF" osd create "$UUID")
[ "$ID" = 0 ] || fail "unexpected osd id $ID"
ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$UUID" >>"$D/log/mkfs.out" 2>&1
daemon osd0 ceph-osd -c "$CONF" -f -i 0
ok=
for _ in $(seq 200); do
  running osd0
  cli ceph -c "$CONF" osd dump 2>/dev/null | grep -q '^osd.0 up' && { ok=1; break; }
  sleep 0.3
done
[ -n "$ok" ] || fail "osd.0 did not come up"

# --- radosgw ---
daemon rgw radosgw -c "$CONF" -f -n client.rgw
ok=
for _ in $(seq 300); do
  running rgw
  curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$RGW_PORT/" && { ok=1; break; }
  sleep 0.3
done
[ -n "$ok" ] || fail "radosgw did not answer on 127.0.0.1:$RGW_PORT"
cli radosgw-admin -c "$CONF" user create --uid test --display-name test \
  --access-key test --secret test >>"$D/log/user.out" 2>&1

T1=$(date +%s.%N)
echo "READY endpoint=http://127.0.0.1:$RGW_PORT access=test secret=test dir=$D startup=$(awk "BEGIN{printf \"%.1f\", $T1-$T0}")s"
