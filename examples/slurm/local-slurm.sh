#!/usr/bin/env bash
# A single-node Slurm on this machine, from Debian packages and without systemd: munged,
# slurmctld and slurmd started by hand with a minimal slurm.conf (NodeName=localhost,
# proctrack/linuxproc, task/none: no cgroups needed, so it runs in a container too), all of it
# private to one state directory (its own munge socket and key, its own ports), so it neither
# needs nor disturbs a system Slurm. For trying rumor.sbatch, and for tests/slurm/test_slurm.sh.
#
# Usage: examples/slurm/local-slurm.sh up|down|status|env
#   up      install the packages if missing (apt-get, as root), write the config, start the
#           daemons, wait (bounded) until the node is idle. Idempotent: a running cluster is kept.
#   down    stop the daemons (bounded waits, then SIGKILL) and remove the runtime state.
#   status  exit 0 and print the node if the cluster answers, 1 otherwise.
#   env     print the line to eval so sbatch/squeue/scontrol talk to it: export SLURM_CONF=...
# Environment: RUMOR_SLURM_DIR (/tmp/rumor-slurm), RUMOR_SLURM_PORT (16817 for slurmctld,
#   +1 for slurmd), RUMOR_SLURM_WAIT (30: seconds to wait for each daemon).
# Exit codes: 0 done; 77 cannot stand Slurm up here (not root, packages missing and no apt-get,
#   a daemon that does not start: the reason is printed, the daemons started are stopped).
set -euo pipefail
dir="$(realpath -m "${RUMOR_SLURM_DIR:-/tmp/rumor-slurm}")"
port="${RUMOR_SLURM_PORT:-16817}"
wait_s="${RUMOR_SLURM_WAIT:-30}"
conf="$dir/etc/slurm.conf"
sock="$dir/munge/munge.socket.2"
packages=(slurmctld slurmd slurm-client munge)
export SLURM_CONF="$conf"

say() { echo "local-slurm: $*" >&2; }
cannot() { say "cannot stand Slurm up: $*"; exit 77; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Waits up to wait_s seconds (wall clock) for a command to succeed; each try is cut at 5 s (a
# Slurm client retries a dead controller for much longer than that on its own).
wait_for() {
  local what="$1"
  shift
  local deadline=$((SECONDS + wait_s))
  while [ $SECONDS -lt $deadline ]; do
    if declare -F "$1" >/dev/null; then
      "$@" >/dev/null 2>&1 && return 0  # a function of ours: its Slurm calls have their own timeouts
    else
      timeout 5 "$@" >/dev/null 2>&1 && return 0
    fi
    sleep 0.1
  done
  say "timed out after ${wait_s} s waiting for $what"
  return 1
}

node_state() { timeout 10 sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1; }

stop_pidfile() {  # stop_pidfile NAME PIDFILE: SIGTERM, up to 10 s, then SIGKILL
  local name="$1" pf="$2" pid i
  [ -f "$pf" ] || return 0
  pid="$(cat "$pf")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name ($pid) ignored SIGTERM for 10 s: SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pf"
}

down() {
  # Jobs first, so their steps do not outlive slurmd.
  if pid_alive "$dir/run/slurmctld.pid"; then timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true; fi
  stop_pidfile slurmd "$dir/run/slurmd.pid"
  stop_pidfile slurmctld "$dir/run/slurmctld.pid"
  stop_pidfile munged "$dir/run/munged.pid"
  rm -rf "$dir/state" "$dir/spool" "$dir/run" "$dir/munge"
}

install_packages() {
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || cannot "packages missing (${missing[*]}) and not root to install them"
  command -v apt-get >/dev/null || cannot "packages missing (${missing[*]}) and no apt-get"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The packages' maintainer scripts try to start their services; there is no init system to
  # start them with here, and we start our own daemons anyway: deny it for the install.
  local made_policy=0 rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
  [ $made_policy -eq 0 ] || rm -f /usr/sbin/policy-rc.d
  [ $rc -eq 0 ] || cannot "apt-get install ${missing[*]} failed"
}

write_config() {
  local cpus
  cpus="$(nproc)"
  mkdir -p "$dir/etc" "$dir/state" "$dir/spool/slurmd" "$dir/run" "$dir/log" "$dir/munge"
  cat > "$conf" <<EOF
# Written by examples/slurm/local-slurm.sh: one node, no cgroups, no accounting database.
ClusterName=rumor-local
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Quick turnaround for tests; jobs stay visible to scontrol for 10 minutes after they end.
SlurmctldTimeout=30
SlurmdTimeout=60
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

up() {
  if pid_alive "$dir/run/slurmctld.pid" && pid_alive "$dir/run/slurmd.pid" && pid_alive "$dir/run/munged.pid" &&
     [ -n "$(node_state)" ]; then
    say "already up ($(node_state)); $conf"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || cannot "slurmd must run as root (it starts job steps as their users)"
  install_packages
  for b in munged slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || cannot "$b not found after installing ${packages[*]}"
  done
  down  # whatever half-started cluster was left behind
  write_config
  # munge: a fresh key, its own socket. munged refuses group/world-writable directories.
  chmod 700 "$dir/munge"
  chmod 755 "$dir" "$dir/run" "$dir/log"
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  trap 'say "start-up failed: stopping what was started"; down; exit 77' ERR
  /usr/sbin/munged --force --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/run/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  wait_for "munged" munge -n -S "$sock" || { tail -n 5 "$dir/log/munged.log" >&2; false; }
  /usr/sbin/slurmctld -f "$conf" || { tail -n 20 "$dir/log/slurmctld.log" >&2; false; }
  wait_for "slurmctld" scontrol ping || { tail -n 20 "$dir/log/slurmctld.log" >&2; false; }
  /usr/sbin/slurmd -f "$conf" -N localhost || { tail -n 20 "$dir/log/slurmd.log" >&2; false; }
  idle() { case "$(node_state)" in idle*|mix*|alloc*) return 0 ;; *) return 1 ;; esac; }
  wait_for "the node to register" idle || { tail -n 20 "$dir/log/slurmd.log" >&2; false; }
  trap - ERR
  say "up: node localhost $(node_state), $(nproc) CPUs; logs in $dir/log"
  say "use it with: export SLURM_CONF=$conf"
}

case "${1:-}" in
  up) up ;;
  down) down; say "down" ;;
  status)
    s=""
    pid_alive "$dir/run/slurmctld.pid" && s="$(node_state)"
    [ -n "$s" ] || { say "not running ($conf)"; exit 1; }
    echo "localhost $s"
    ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
