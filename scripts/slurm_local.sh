#!/usr/bin/env bash
# A single-node SLURM on 127.0.0.1 for testing the cluster path (tests/test_cluster.py).
#
#   scripts/slurm_local.sh up DIR     # install slurm-wlm + munge if missing (root), start munged,
#                                     # slurmctld and slurmd with DIR/slurm.conf; prints SLURM_CONF=...
#   scripts/slurm_local.sh down DIR   # stops every daemon it started, removes DIR
#
# Everything it starts is recorded in DIR/pids; nothing is left running after `down`.
# Loopback only: the node is this machine, its address 127.0.0.1.
set -euo pipefail
cmd=${1:?usage: slurm_local.sh up|down DIR}
dir=${2:?usage: slurm_local.sh up|down DIR}

die() { echo "slurm_local: $*" >&2; exit 1; }

install_if_missing() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "slurm-wlm is not installed and installing it needs root"
  command -v apt-get >/dev/null || die "slurm-wlm is not installed and there is no apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >"$dir/apt.log" 2>&1 \
    || { apt-get update -q >>"$dir/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >>"$dir/apt.log" 2>&1; } \
    || die "apt-get install slurm-wlm munge failed (see $dir/apt.log)"
}

write_conf() {
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=chunklab
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$((6817 + RANDOM % 1000))
SlurmdPort=$((7900 + RANDOM % 1000))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=30
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

up() {
  mkdir -p "$dir"
  install_if_missing
  write_conf
  : >"$dir/pids"
  if ! munge -n >/dev/null 2>&1; then  # no munged answering: start one
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    if [ "$(id -u)" = 0 ]; then runuser -u munge -- munged; else munged; fi
    for _ in $(seq 1 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    echo "munged $(cat /run/munge/munged.pid)" >>"$dir/pids"  # the daemon's pid, after it forked
  fi
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 1 60); do
    [ -s "$dir/slurmctld.pid" ] && [ -s "$dir/slurmd.pid" ] && sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && break
    sleep 0.5
  done
  echo "slurmctld $(cat "$dir/slurmctld.pid")" >>"$dir/pids"
  echo "slurmd $(cat "$dir/slurmd.pid")" >>"$dir/pids"
  sinfo -h -o %T | grep -qE '^idle' || die "the node did not come up idle (logs in $dir/log)"
  echo "SLURM_CONF=$SLURM_CONF"
}

down() {
  [ -f "$dir/pids" ] || { rm -rf "$dir"; return 0; }
  if [ -f "$dir/slurm.conf" ] && command -v scancel >/dev/null; then
    SLURM_CONF="$dir/slurm.conf" scancel --full --user "$(id -un)" 2>/dev/null || true
  fi
  while read -r name pid; do
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done < <(tac "$dir/pids")
  rm -rf "$dir"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) die "unknown command $cmd (up|down)" ;;
esac
