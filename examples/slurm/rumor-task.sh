#!/usr/bin/env bash
# One Slurm task = one rumor-peer. Run by srun from rumor.sbatch and rumor-hetjob.sbatch (read
# them first); everything it needs comes from Slurm's task variables and the RUMOR_* variables
# the batch script exported. It ends in `exec`, so the signals Slurm sends the task
# (--signal=TERM@120, scancel) reach rumor-peer itself, which leaves the swarm gracefully.
#
#   listen   RUMOR_LISTEN_HOST, else this node's address from RUMOR_NODE_ADDRS ("node=ip ..."),
#            port RUMOR_PORT_BASE + RUMOR_PORT_GROUP_OFFSET + SLURM_LOCALID (distinct per task
#            on a node)
#   metrics  --metrics-listen on the same address, port RUMOR_METRICS_PORT_BASE (7100) +
#            RUMOR_PORT_GROUP_OFFSET + SLURM_LOCALID: /metrics, /status.json and the swarm page
#            (docs/cluster.md); RUMOR_METRICS_PORT_BASE=0 turns it off
#   join     RUMOR_JOIN (built once by the batch script: two members)
#   shard    (RUMOR_SHARD_OFFSET + SLURM_PROCID + 1) / RUMOR_SHARD_TOTAL (default SLURM_NTASKS)
#   device   RUMOR_DEVICE=auto: cuda:0 when Slurm bound one GPU to the task (--gpus-per-task=1
#            sets CUDA_VISIBLE_DEVICES to it), cuda:$SLURM_LOCALID when the task sees several
#            (--gres=gpu:G, one peer per GPU), else cpu; or any --device value
#   files    RUMOR_OUT/peer-K.{log,jsonl,pid}, checkpoints in RUMOR_OUT/checkpoints/peer-K, and
#            --resume after a requeue (SLURM_RESTART_COUNT > 0) or with RUMOR_RESUME=1
#   threads  SLURM_CPUS_PER_TASK (--cpus-per-task)
#   binary   RUMOR_PEER (rumor-peer); more flags in RUMOR_ARGS (word-split)
set -euo pipefail
: "${SLURM_PROCID:?run by srun}" "${SLURM_LOCALID:?run by srun}" "${RUMOR_OUT:?exported by the batch script}"
: "${RUMOR_JOIN:?exported by the batch script}"

k=$((${RUMOR_SHARD_OFFSET:-0} + SLURM_PROCID))
total="${RUMOR_SHARD_TOTAL:-$SLURM_NTASKS}"
port=$((${RUMOR_PORT_BASE:-7000} + ${RUMOR_PORT_GROUP_OFFSET:-0} + SLURM_LOCALID))

host="${RUMOR_LISTEN_HOST:-}"
if [ -z "$host" ]; then
  node="${SLURMD_NODENAME:-$(hostname -s)}"
  for pair in ${RUMOR_NODE_ADDRS:-}; do
    [ "${pair%%=*}" = "$node" ] && host="${pair#*=}"
  done
  [ -n "$host" ] || { echo "rumor-task: no address for node '$node' in RUMOR_NODE_ADDRS='${RUMOR_NODE_ADDRS:-}'" >&2; exit 2; }
fi

device="${RUMOR_DEVICE:-auto}"
if [ "$device" = auto ]; then
  gpus="${CUDA_VISIBLE_DEVICES:-}"
  if [ -z "$gpus" ] || [ "$gpus" = NoDevFiles ]; then
    device=cpu
  elif [[ "$gpus" != *,* ]]; then
    device=cuda:0                    # Slurm bound exactly one GPU to this task
  else
    device="cuda:$SLURM_LOCALID"     # the task sees the node's GPUs: one peer per GPU
  fi
fi

metrics_listen=()
metrics_base="${RUMOR_METRICS_PORT_BASE:-7100}"
if [ "$metrics_base" != 0 ]; then
  metrics_listen=(--metrics-listen "$host:$((metrics_base + ${RUMOR_PORT_GROUP_OFFSET:-0} + SLURM_LOCALID))")
fi

name="peer-$k"
ckpt="$RUMOR_OUT/checkpoints/$name"
mkdir -p "$ckpt"
resume=()
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ "${RUMOR_RESUME:-0}" = 1 ]; then resume=(--resume); fi

echo $$ > "$RUMOR_OUT/$name.pid"  # exec keeps the PID: this is rumor-peer's
# shellcheck disable=SC2086  # RUMOR_ARGS is a list of flags
exec "${RUMOR_PEER:-rumor-peer}" \
  --listen "$host:$port" --join "$RUMOR_JOIN" --join-timeout "${RUMOR_JOIN_TIMEOUT:-120}" \
  --shard "$((k + 1))/$total" --min-peers "${RUMOR_MIN_PEERS:-$total}" --device "$device" \
  --threads "${SLURM_CPUS_PER_TASK:-1}" \
  --checkpoint "$ckpt" --checkpoint-every "${RUMOR_CHECKPOINT_EVERY:-60}" "${resume[@]}" \
  --name "$name" --metrics "$RUMOR_OUT/$name.jsonl" "${metrics_listen[@]}" ${RUMOR_ARGS:-} 2>>"$RUMOR_OUT/$name.log"
