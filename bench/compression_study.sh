#!/usr/bin/env bash
# Local SGD x codec study (issue: bounded staleness, local SGD and compressed exchanges).
# 4 peers on loopback, Fashion-MNIST shards 1/4..4/4, default model and optimizer, for every
# H in {1,4,16,64} and codec in {none,fp16,int8,topk}; then the staleness throughput runs (one
# peer 5x slower: unthrottled, TAU=inf, TAU=500, TAU=16, TAU=0). Prints tables and writes PNGs.
# A finite TAU binds as soon as the fast peers are TAU steps ahead, after which they go at the
# slow peer's pace; within a run of S steps, a TAU of at least (1 - 1/5) S never binds: that is
# the "generous" one (S = 470 here).
#
# Usage: bench/compression_study.sh [BUILD_DIR] [OUT_DIR]     (env: EPOCHS=2, HS, CODECS)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
out="${2:-$here/out/compression}"
epochs="${EPOCHS:-2}"
hs="${HS:-1 4 16 64}"
codecs="${CODECS:-none fp16 int8 topk}"
bin="$build/peer/rumor-peer"
[ -x "$bin" ] || { echo "build first: $bin not found" >&2; exit 1; }
mkdir -p "$out"

# run NAME FLAGS-FOR-ALL -- FLAGS-FOR-PEER-1 : starts 4 peers, waits, leaves NAME/m{1..4}.jsonl
run() {
  local name="$1" all="$2" first="${3:-}"
  local d="$out/$name"
  rm -rf "$d"; mkdir -p "$d"
  "$bin" --listen 127.0.0.1:0 --shard 1/4 --min-peers 4 --name p1 --metrics "$d/m1.jsonl" $all $first 2>"$d/p1.log" &
  local pids=($!) seed=""
  for _ in $(seq 1 600); do
    seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$d/p1.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
    [ -n "$seed" ] && break
    sleep 0.1
  done
  for k in 2 3 4; do
    "$bin" --listen 127.0.0.1:0 --join "$seed" --shard "$k/4" --min-peers 4 --name "p$k" --metrics "$d/m$k.jsonl" $all 2>"$d/p$k.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do timeout 900 tail --pid="$p" -f /dev/null; done
  wait || true
  echo "   $name done"
}

echo "== H x codec grid, $epochs epochs each"
for h in $hs; do
  for c in $codecs; do
    run "H${h}-${c}" "--epochs $epochs --local-steps $h --codec $c"
  done
done

echo "== staleness: one peer 5x slower"
run "fast-unthrottled" "--epochs $epochs"
run "slow-tauinf" "--epochs $epochs --staleness inf" "--throttle 5"
run "slow-tau500" "--epochs $epochs --staleness 500" "--throttle 5"
run "slow-tau16" "--epochs $epochs --staleness 16" "--throttle 5"
run "slow-tau0" "--epochs $epochs --staleness 0" "--throttle 5"

/usr/bin/python3 "$here/bench/compression_report.py" "$out"
