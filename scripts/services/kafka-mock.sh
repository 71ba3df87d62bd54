#!/bin/bash
# librdkafka's Kafka protocol mock cluster, served by kcat, as the Kafka peer for
# tests. It listens on ports the kernel picks, so runs never collide.
#
# Usage: kafka-mock.sh start [DIR]   DIR must be empty or absent (default: a
#                                    fresh mktemp -d under ${TMPDIR:-/tmp})
#        kafka-mock.sh stop DIR      stops it and removes DIR; safe to repeat
# Environment:
#   KAFKA_MOCK_BROKERS  number of brokers (default 1)
#   TIDEMARK_WATCH_PID  if set, a detached watchdog runs `stop DIR` as soon as
#                       that process exits (also when it is killed with SIGKILL)
# `start` prints one line on stdout and returns, leaving kcat running:
#   READY brokers=127.0.0.1:PORT[,127.0.0.1:PORT...] dir=DIR startup=SECONDSs
# Topics are created on first use with 4 partitions. The mock refuses admin
# createTopics/deleteRecords/setOffsets and the idempotent and transactional
# producer.
# Needs: apt-get install -y --no-install-recommends kcat
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

stop() {
  local d=$1 targets=() stat pgid
  [ -d "$d" ] || { echo "nothing to stop in $d"; return 0; }
  if [ -f "$d/pgid" ]; then
    read -r -a stat </proc/$$/stat
    pgid=$(cat "$d/pgid")
    [ "$pgid" != "${stat[4]}" ] && targets+=("-$pgid")
  fi
  [ -f "$d/pid" ] && targets+=("$(cat "$d/pid")")
  [ ${#targets[@]} -gt 0 ] && kill_all "${targets[@]}"
  rm -rf "$d"
  echo stopped
}

start() {
  local t0 d pid line brokers stat _
  t0=$(date +%s.%N)
  work_dir d kafka 'kafka-mock.sh stop' "$@" || exit 1
  read -r -a stat </proc/$$/stat
  [ "${stat[4]}" = "$$" ] && echo "$$" >"$d/pgid"
  if [ -n "${TIDEMARK_WATCH_PID:-}" ]; then
    start_watchdog "$TIDEMARK_WATCH_PID" "$d" "$HERE/kafka-mock.sh" stop
  fi
  # Without `-d mock` librdkafka still logs the mock's address (at notice
  # level) but not a line per request, so the log stays a few lines long.
  # kcat itself only consumes the idle topic "keepalive" to stay up.
  kcat -X "test.mock.num.brokers=${KAFKA_MOCK_BROKERS:-1}" -b localhost:1 -t keepalive -C \
    </dev/null >/dev/null 2>"$d/kcat.log" &
  pid=$!
  echo "$pid" >"$d/pid"
  brokers=
  for _ in $(seq 100); do
    line=$(grep -m1 -o 'replaced with [0-9.:,]*' "$d/kcat.log" || true)
    if [ -n "$line" ]; then brokers=${line#replaced with }; break; fi
    alive "$pid" || break
    sleep 0.05
  done
  if [ -z "$brokers" ]; then
    { echo "kafka-mock.sh: kcat did not start a mock cluster:"; cat "$d/kcat.log"; } >&2
    stop "$d" >/dev/null
    exit 1
  fi
  echo "READY brokers=$brokers dir=$d startup=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}")s"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) [ $# -eq 2 ] || { echo "usage: kafka-mock.sh stop DIR" >&2; exit 2; }; stop "$2" ;;
  *) echo "usage: kafka-mock.sh start [DIR] | kafka-mock.sh stop DIR" >&2; exit 2 ;;
esac
