# shellcheck shell=bash
# Shared by rumor.sbatch and rumor-hetjob.sbatch (sourced in the batch script, on the job's first
# node): where Rumor is, node addresses, the join list, the requeue after a time limit and the
# summary. Sourced, not run.

# RUMOR_HOME: the checkout (default: where sbatch was run, e.g. `sbatch examples/slurm/rumor.sbatch`
# from the repository root). RUMOR_PEER: the binary (default: its build, else rumor-peer on PATH).
# RUMOR_OUT: logs, metrics and checkpoints (default RUMOR_HOME/out/slurm-JOBID: a requeued job
# keeps its id, so it finds its checkpoints).
rumor_slurm_setup() {
  export RUMOR_HOME="${RUMOR_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
  rumor_task="$RUMOR_HOME/examples/slurm/rumor-task.sh"
  [ -x "$rumor_task" ] || { echo "rumor: $rumor_task not found: sbatch from the repository root or set RUMOR_HOME" >&2; exit 2; }
  if [ -z "${RUMOR_PEER:-}" ]; then
    if [ -x "$RUMOR_HOME/build/peer/rumor-peer" ]; then RUMOR_PEER="$RUMOR_HOME/build/peer/rumor-peer"
    else RUMOR_PEER="$(command -v rumor-peer || true)"; fi
  fi
  if [ -z "$RUMOR_PEER" ] || [ ! -x "$RUMOR_PEER" ]; then
    echo "rumor: rumor-peer not found (build it, or set RUMOR_PEER)" >&2
    exit 2
  fi
  export RUMOR_PEER
  export RUMOR_OUT="${RUMOR_OUT:-$RUMOR_HOME/out/slurm-$SLURM_JOB_ID}"
  mkdir -p "$RUMOR_OUT"
  export RUMOR_PORT_BASE="${RUMOR_PORT_BASE:-7000}"
}

# The IPv4 address every node is known by, resolved once here so that all peers agree on each
# other's ids (a peer's id is the address it listens on): RUMOR_NODE_ADDRS="node=ip ...".
# Nodes from `scontrol show hostnames` of each node list given (one per heterogeneous component).
rumor_resolve_nodes() {
  local nodes=() n ip list
  for list in "$@"; do
    while read -r n; do
      case " ${nodes[*]} " in *" $n "*) ;; *) nodes+=("$n") ;; esac  # distinct nodes
    done < <(scontrol show hostnames "$list")
  done
  RUMOR_NODE_ADDRS=""
  for n in "${nodes[@]}"; do
    ip="$(getent ahostsv4 "$n" | awk 'NR == 1 { print $1 }')"
    [ -n "$ip" ] || { echo "rumor: cannot resolve node '$n' (getent ahostsv4)" >&2; exit 2; }
    if [[ "$ip" == 127.* ]] && [ "${#nodes[@]}" -gt 1 ] && [ -z "${RUMOR_LISTEN_HOST:-}" ]; then
      echo "rumor: node '$n' resolves to $ip (loopback) on $(hostname -s), but the job has several nodes;" \
           "fix the host's name resolution (/etc/hosts), or run one node" >&2
      exit 2
    fi
    RUMOR_NODE_ADDRS+="${RUMOR_NODE_ADDRS:+ }$n=$ip"
  done
  export RUMOR_NODE_ADDRS
}

# The address of node $1 from RUMOR_NODE_ADDRS (RUMOR_LISTEN_HOST overrides: one-node runs).
rumor_addr() {
  local pair
  if [ -n "${RUMOR_LISTEN_HOST:-}" ]; then echo "$RUMOR_LISTEN_HOST"; return; fi
  for pair in $RUMOR_NODE_ADDRS; do
    [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }
  done
}

# After srun returns: if the job is within RUMOR_REQUEUE_MARGIN s (default 180) of its time
# limit, the peers were stopped by --signal=TERM@120 (they left gracefully and checkpointed):
# requeue, and the tasks come back with --resume. At most RUMOR_MAX_REQUEUES times (10).
rumor_requeue_if_timed_out() {
  local end now
  end="$(scontrol show job "$SLURM_JOB_ID" | grep -o 'EndTime=[^ ]*' | head -n 1 | cut -d= -f2)"
  [ -n "$end" ] && [ "$end" != Unknown ] || return 0
  now="$(date +%s)"
  end="$(date -d "$end" +%s 2>/dev/null)" || return 0
  if [ $((end - now)) -lt "${RUMOR_REQUEUE_MARGIN:-180}" ] && [ "${SLURM_RESTART_COUNT:-0}" -lt "${RUMOR_MAX_REQUEUES:-10}" ]; then
    echo "rumor: stopped near the time limit: requeueing job $SLURM_JOB_ID (restart $((${SLURM_RESTART_COUNT:-0} + 1)))"
    scontrol requeue "$SLURM_JOB_ID"
  fi
}

# One line per peer: its final test accuracy (the metrics file's last "done" line).
rumor_summary() {
  local f acc steps
  echo "rumor: results in $RUMOR_OUT"
  for f in "$RUMOR_OUT"/peer-*.jsonl; do
    [ -e "$f" ] || continue
    acc="$(grep '"event":"done"' "$f" | tail -n 1 | grep -o '"test_acc":[0-9.eE+-]*' | cut -d: -f2 || true)"
    steps="$(grep '"event":"done"' "$f" | tail -n 1 | grep -o '"steps":[0-9]*' | cut -d: -f2 || true)"
    if [ -n "$acc" ]; then echo "  $(basename "$f" .jsonl): test_acc $acc after $steps steps"
    else echo "  $(basename "$f" .jsonl): no done line (see $(basename "$f" .jsonl).log)"; fi
  done
}
