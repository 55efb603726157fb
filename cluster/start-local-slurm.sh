#!/usr/bin/env bash
# start-local-slurm.sh: install (if missing) and start a real single-node Slurm
# cluster on this host (munged, slurmctld, slurmd) for the Slurm tests.
#
# Debian/Ubuntu, run as root, no systemd needed: the daemons are started directly.
# No accounting database: `sacct` does not work here, so Snakemake must poll
# with `slurm-status-command: squeue` (profiles/slurm-test does); MinJobAge=300
# keeps finished jobs visible to squeue long enough. Finished jobs are also
# written to $STATE_DIR/log/jobcomp.log (one line per job, with its state).
#
# Two fake GPUs (gres File=/dev/null and /dev/zero) let `gpu=1` jobs schedule for
# real on a machine without a GPU.
#
# Idempotent: packages, config and daemons that already exist or run are left
# alone. Every daemon THIS script starts is recorded in $STATE_DIR/started
# ("name pidfile") so stop-local-slurm.sh stops exactly those.
#
# Environment (all optional):
#   LOCAL_SLURM_STATE_DIR   state/log/spool/pid dir      [${TMPDIR:-/tmp}/local-slurm]
#   LOCAL_SLURM_CLUSTER     ClusterName                  [localcluster]
#   LOCAL_SLURM_PARTITION   the (default) partition      [debug]
#   LOCAL_SLURM_WAIT_S      max seconds to wait per step [60]
# Exit codes: 0 ready; 1 error; 2 cannot run here (not root, no apt, no network).
set -euo pipefail

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-${TMPDIR:-/tmp}/local-slurm}
CLUSTER=${LOCAL_SLURM_CLUSTER:-localcluster}
PARTITION=${LOCAL_SLURM_PARTITION:-debug}
WAIT_S=${LOCAL_SLURM_WAIT_S:-60}

RUN_DIR=$STATE_DIR/run
LOG_DIR=$STATE_DIR/log
STARTED=$STATE_DIR/started
SLURM_CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
MUNGE_PID=/run/munge/munged.pid

log() { echo "[start-local-slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
cannot() { log "CANNOT RUN HERE: $*"; exit 2; }

[ "$(id -u)" = 0 ] || cannot "must run as root (installs packages, writes /etc/slurm)"

# alive NAME PIDFILE: succeed (and print the pid) if PIDFILE names a live process called NAME
alive() {
  local name=$1 pidfile=$2 pid
  [ -s "$pidfile" ] || return 1
  pid=$(tr -dc '0-9' < "$pidfile")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  [ "$(cat "/proc/$pid/comm")" = "$name" ] || return 1
  echo "$pid"
}
# record NAME PIDFILE: remember that this script started NAME
record() {
  touch "$STARTED"
  grep -v "^$1 " "$STARTED" > "$STARTED.tmp" || true
  echo "$1 $2" >> "$STARTED.tmp"
  mv "$STARTED.tmp" "$STARTED"
}
# wait_for DESCRIPTION CMD...: retry CMD every 0.5 s for up to WAIT_S seconds
wait_for() {
  local what=$1; shift
  local deadline=$((SECONDS + WAIT_S))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
  log "$what: ok"
}
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# --- 1. packages -------------------------------------------------------------
PKGS=(munge slurm-wlm slurmctld slurmd slurm-client)
MISSING=()
command -v dpkg-query >/dev/null || cannot "no dpkg: this script installs Slurm with apt (Debian/Ubuntu)"
for p in "${PKGS[@]}"; do pkg_installed "$p" || MISSING+=("$p"); done
if [ ${#MISSING[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || cannot "no apt-get to install ${MISSING[*]}"
  log "installing: ${MISSING[*]}"
  # Without systemd the packages' maintainer scripts must not try to start services.
  POLICY_CREATED=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
    POLICY_CREATED=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null; } || rc=$?
  [ $POLICY_CREATED = 1 ] && rm -f /usr/sbin/policy-rc.d
  if [ $rc != 0 ]; then
    for p in "${MISSING[@]}"; do pkg_installed "$p" || cannot "apt-get could not install $p (no network or no package source?)"; done
  fi
else
  log "packages already installed"
fi

# --- 2. directories, munge key -------------------------------------------------
mkdir -p "$STATE_DIR" "$RUN_DIR" "$LOG_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd" /etc/slurm
chmod 755 "$STATE_DIR"
chown slurm:slurm "$RUN_DIR" "$LOG_DIR" "$STATE_DIR/slurmctld"
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi

# --- 3. slurm.conf, gres.conf ----------------------------------------------------
NODE=$(hostname -s)
HW=$(slurmd -C | head -1)     # NodeName=x CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105
hw() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<< "$HW"; }
CPUS=$(hw CPUs); BOARDS=$(hw Boards); SPB=$(hw SocketsPerBoard); CPS=$(hw CoresPerSocket); TPC=$(hw ThreadsPerCore); MEM=$(hw RealMemory)
[ -n "$CPUS" ] && [ -n "$MEM" ] || die "could not read the hardware from 'slurmd -C': $HW"
SOCKETS=$((BOARDS * SPB))
MEM_CONF=$((MEM * 90 / 100))          # leave ~10 % for the OS
DEF_MEM=$((MEM_CONF / CPUS / 4))      # without it a job lacking --mem takes the whole node
[ $DEF_MEM -lt 100 ] && DEF_MEM=100

write_if_changed() {  # write_if_changed DEST < content; prints 1 if DEST changed
  local dest=$1 tmp="$STATE_DIR/$(basename "$1").new"
  cat > "$tmp"
  if cmp -s "$tmp" "$dest"; then rm -f "$tmp"; echo 0
  else mv "$tmp" "$dest"; chmod 644 "$dest"; log "wrote $dest"; echo 1; fi
}

CONF_CHANGED=$(write_if_changed "$SLURM_CONF" <<EOF
# generated by start-local-slurm.sh: single node, no cgroups, no systemd, no accounting
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
GresTypes=gpu
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CPS ThreadsPerCore=$TPC RealMemory=$MEM_CONF Gres=gpu:2 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$DEF_MEM
EOF
)
# A Count= line without File= leaves the node invalid; two device files make two GPUs.
GRES_CHANGED=$(write_if_changed "$GRES_CONF" <<EOF
NodeName=$NODE Name=gpu File=/dev/null
NodeName=$NODE Name=gpu File=/dev/zero
EOF
)

# --- 4. munged -----------------------------------------------------------------
if pid=$(alive munged "$MUNGE_PID"); then
  log "munged already running (pid $pid)"
else
  runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID"
  wait_for "munged" bash -c 'munge -n | unmunge' || die "munged did not come up (see /var/log/munge/munged.log)"
  record munged "$MUNGE_PID"
fi

# --- 5. slurmctld, slurmd ----------------------------------------------------------
if pid=$(alive slurmctld "$RUN_DIR/slurmctld.pid"); then
  log "slurmctld already running (pid $pid)"
  if [ "$CONF_CHANGED$GRES_CHANGED" != 00 ]; then log "config changed: scontrol reconfigure"; scontrol reconfigure; fi
else
  /usr/sbin/slurmctld
  wait_for "slurmctld" bash -c 'scontrol ping | grep -q UP' || die "slurmctld did not come up (see $LOG_DIR/slurmctld.log)"
  record slurmctld "$RUN_DIR/slurmctld.pid"
fi
if pid=$(alive slurmd "$RUN_DIR/slurmd.pid"); then
  log "slurmd already running (pid $pid)"
else
  /usr/sbin/slurmd
  wait_for "slurmd pid file" test -s "$RUN_DIR/slurmd.pid" || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
  record slurmd "$RUN_DIR/slurmd.pid"
fi

# --- 6. wait for the node to take jobs ------------------------------------------------
node_ready() {
  local st; st=$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1)
  case "$st" in
    idle|mixed|allocated|completing) return 0 ;;
    *drain*|down*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true; return 1 ;;
    *) return 1 ;;
  esac
}
wait_for "node $NODE ready" node_ready || { sinfo -N -l >&2; die "node $NODE not idle after ${WAIT_S}s (see $LOG_DIR/slurmd.log)"; }
sinfo -N -o "%N %P %T %c %m %G" >&2
