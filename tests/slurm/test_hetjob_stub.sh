#!/usr/bin/env bash
# examples/slurm/rumor-hetjob.sbatch run as a plain script under stand-ins for srun and scontrol
# (tests/slurm/stub/): a real heterogeneous job cannot run on a one-node Slurm (the components
# are not placed on one node), so this checks the script's own logic instead: two components
# of 2 tasks each on loopback form one swarm of 4, with shards 1/4..4/4 numbered across the
# components, ports BASE+LOCALID and BASE+100+LOCALID, and the join list of the first peer of
# each component. The Slurm side (the HET_GROUP variables, srun --het-group) is not exercised.
# Usage: tests/slurm/test_hetjob_stub.sh PATH/TO/rumor-peer
set -euo pipefail
peer="$(realpath "${1:?path to rumor-peer}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mktemp -d /tmp/rumor-hetjob-stub.XXXXXX)"
trap 'rm -rf "$out"' EXIT
fail() { echo "FAILED: $*" >&2; tail -n 5 "$out"/peer-*.log >&2 || true; exit 1; }
base=$((20000 + RANDOM % 20000))
timeout 120 env PATH="$here/tests/slurm/stub:$PATH" SLURM_JOB_ID=1 SLURM_SUBMIT_DIR="$here" RUMOR_PEER="$peer" \
  SLURM_JOB_NODELIST_HET_GROUP_0=localhost SLURM_JOB_NODELIST_HET_GROUP_1=localhost \
  SLURM_NTASKS_HET_GROUP_0=2 SLURM_NTASKS_HET_GROUP_1=2 RUMOR_OUT="$out" RUMOR_PORT_BASE="$base" \
  RUMOR_ARGS="--data synthetic --model logreg --duration 3" \
  bash "$here/examples/slurm/rumor-hetjob.sbatch" > "$out/job.out" 2>&1 || { cat "$out/job.out"; fail "the batch script failed"; }
cat "$out/job.out"
grep -q "join list 127.0.0.1:$base,127.0.0.1:$((base + 100))" "$out/job.out" || fail "join list"
ports=("$base" "$((base + 1))" "$((base + 100))" "$((base + 101))")
for k in 0 1 2 3; do
  log="$out/peer-$k.log"
  grep -q "shard $((k + 1))/4:" "$log" || fail "peer-$k is not on shard $((k + 1))/4"
  grep -q "listening on 127.0.0.1:${ports[$k]}" "$log" || fail "peer-$k does not listen on port ${ports[$k]}"
  grep -q '"event":"done"' "$out/peer-$k.jsonl" || fail "peer-$k did not finish"
  peers="$(grep '"event":"eval"' "$out/peer-$k.jsonl" | grep -o '"peers":[0-9]*' | cut -d: -f2 | sort -n | tail -n 1)"
  [ "$peers" = 4 ] || fail "peer-$k saw at most $peers peers, not 4 (one swarm)"
done
echo "PASSED: 4 peers in 2 components, one swarm"
