#!/usr/bin/env bash
# stop-local-slurm.sh: stop exactly the daemons start-local-slurm.sh started
# (listed in $STATE_DIR/started as "name pidfile"), in reverse dependency order.
# A daemon is only signalled if its pid file names a live process with the
# expected name. Idempotent: with nothing recorded it does nothing.
#   stop-local-slurm.sh             stop every recorded daemon
#   stop-local-slurm.sh NAME...     stop only these (e.g. the ones a test session started)
set -euo pipefail

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-${TMPDIR:-/tmp}/local-slurm}
STARTED=$STATE_DIR/started
log() { echo "[stop-local-slurm] $*" >&2; }

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
if [ ! -s "$STARTED" ]; then log "nothing recorded in $STARTED: nothing to stop"; exit 0; fi

pid_of() {  # pid_of NAME PIDFILE -> pid of a live process NAME, else fail
  local pid
  [ -s "$2" ] || return 1
  pid=$(tr -dc '0-9' < "$2")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$1" ] && echo "$pid"
}

ONLY=" $* "
wanted() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }

# Cancel the jobs of the controller we started, so no slurmstepd is left behind.
if wanted slurmctld && ctl=$(grep '^slurmctld ' "$STARTED" | cut -d' ' -f2-) && pid_of slurmctld "$ctl" >/dev/null; then
  jobs=$(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING -o %A 2>/dev/null || true)
  if [ -n "$jobs" ]; then log "cancelling jobs: $(echo $jobs)"; scancel $jobs || true; sleep 2; fi
fi

for name in slurmd slurmctld munged; do
  wanted "$name" || continue
  pidfile=$(grep "^$name " "$STARTED" | cut -d' ' -f2- || true)
  [ -n "$pidfile" ] || continue
  if pid=$(pid_of "$name" "$pidfile"); then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then log "$name did not exit after 30 s: SIGKILL"; kill -KILL "$pid" || true; fi
  else
    log "$name not running (pid file $pidfile)"
  fi
  grep -v "^$name " "$STARTED" > "$STARTED.tmp" || true
  mv "$STARTED.tmp" "$STARTED"
done
[ -s "$STARTED" ] || rm -f "$STARTED"
log "done"
