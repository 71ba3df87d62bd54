# Shared by the service scripts beside this file; sourced, never run.

# claim_port VAR DIR: pick a free TCP port on 127.0.0.1 and store it in VAR.
# A port counts as free when nothing answers on it and no other service started
# by these scripts holds it. Holding is a symlink ${TMPDIR:-/tmp}/tidemark-ports-UID/PORT
# -> DIR: creating a symlink is atomic, so two runs starting at the same moment
# cannot pick the same port, and the link dangles (and is reclaimed) once DIR is
# gone, even if the owner died without cleaning up. Ports are drawn below the
# kernel's ephemeral range so outgoing connections cannot take them meanwhile.
claim_port() {
  local var=$1 dir=$2 claims=${TMPDIR:-/tmp}/tidemark-ports-$(id -u) low hi p i
  mkdir -p "$claims"
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range || low=32768
  hi=$low; [ "$hi" -gt 10000 ] || hi=32768
  for i in $(seq 200); do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (hi - 10000) ))
    if [ -L "$claims/$p" ] && [ ! -e "$claims/$p" ]; then
      rm -f "$claims/$p"      # its owner's data dir is gone
    fi
    (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue   # something listens there
    ln -s "$dir" "$claims/$p" 2>/dev/null || continue      # another run holds it
    echo "$p" >>"$dir/ports"
    printf -v "$var" '%s' "$p"
    return 0
  done
  echo "no free port found" >&2
  return 1
}

# work_dir VAR NAME HINT [DIR]: the absolute path of the service's working
# directory in VAR: DIR, created if missing, which must be empty (HINT is the
# command that stops what may be running there), or a new temporary directory
# tidemark-NAME.XXXXXX.
work_dir() {
  local var=$1 name=$2 hint=$3 wd
  if [ $# -ge 4 ]; then
    wd=$4
    mkdir -p "$wd"
    [ -z "$(ls -A "$wd")" ] || { echo "${0##*/}: $wd is not empty (running? $hint $wd)" >&2; return 1; }
  else
    wd=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-$name.XXXXXX")
  fi
  wd=$(cd "$wd" && pwd)
  printf -v "$var" '%s' "$wd"
}

# release_ports DIR: drop the port claims made for DIR.
release_ports() {
  local dir=$1 claims=${TMPDIR:-/tmp}/tidemark-ports-$(id -u) p
  [ -f "$dir/ports" ] || return 0
  while read -r p; do
    [ "$(readlink "$claims/$p" 2>/dev/null)" = "$dir" ] && rm -f "$claims/$p"
  done <"$dir/ports"
}

# start_watchdog PID DIR CMD...: when process PID ends while DIR still exists,
# run `CMD... DIR`. "Ends" also covers a zombie and a PID reused by another
# process (the start time in /proc/PID/stat changes). The loop runs in its own
# session so that stopping the service's process group does not take the
# watchdog with it, and with every stream closed so that a caller reading our
# stdout sees it end. It polls once a second and ends by itself once DIR is
# removed (by a normal stop).
start_watchdog() {
  local pid=$1 dir=$2; shift 2
  setsid bash -c '
    pid=$1 dir=$2; shift 2
    started() { # the start time of a live pid; nothing when gone or a zombie
      local s; s=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
      set -- ${s##*) }
      [ "$1" = Z ] || echo "${20}"
    }
    first=$(started)
    while [ -d "$dir" ]; do
      if [ -z "$first" ] || [ "$(started)" != "$first" ]; then exec "$@" "$dir"; fi
      sleep 1
    done' watchdog "$pid" "$dir" "$@" </dev/null >/dev/null 2>&1 &
}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ -n "$s" ] && [ "${s%% *}" != Z ]
}

# kill_all TARGET...: SIGKILL the targets (a PID, or -PGID for a process group)
# and wait up to 5 s until the PIDs are gone. The services keep nothing worth
# an orderly shutdown (memstore lives in RAM), and SIGTERM makes ceph-osd take
# seconds to exit.
kill_all() {
  local t i busy
  kill -KILL -- "$@" 2>/dev/null || true
  for i in $(seq 50); do
    busy=0
    for t in "$@"; do
      case $t in -*) ;; *) alive "$t" && busy=1 ;; esac
    done
    [ "$busy" = 0 ] && return 0
    sleep 0.1
  done
}
