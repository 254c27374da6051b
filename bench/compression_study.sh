#!/usr/bin/env bash
# Local SGD x codec study (issue: bounded staleness, local SGD and compressed exchanges).
# 4 peers on loopback, Fashion-MNIST shards 1/4..4/4, default model and optimizer, for every
# H in {1,4,16,64} and codec in {none,fp16,int8,int4,topk} (and, with FRAGMENTS, the model
# averaged whole or in fragments, --fragments); then the staleness throughput runs (one
# peer 5x slower: unthrottled, TAU=inf, a generous TAU, TAU=16, TAU=0). Prints tables and
# writes PNGs. A finite TAU binds as soon as the fast peers are TAU steps ahead, after which
# they go at the slow peer's pace; within a run of S steps, a TAU of at least (1 - 1/5) S never
# binds: that is the "generous" one (S = 235 steps in 1 epoch: TAU = 200).
#
# Four peers on one 2-core box are not four machines: 4 CPU-bound processes make every round
# trip wait for a descheduled peer, so H=1 manages only about one exchange per two steps. Every
# peer therefore runs with --throttle BASE_THROTTLE (3: each computes a third of the time, so
# 4 peers need 4/3 cores), which emulates four machines slower than this core, each with a core
# of its own (BASE_THROTTLE=1: the plain contended run). In the staleness runs the slow peer
# runs at 5 x BASE_THROTTLE; each configuration is repeated REPEATS times, interleaved, and the
# report gives medians (of the per-repeat ratios, too).
#
# Usage: bench/compression_study.sh [BUILD_DIR] [OUT_DIR]
#   env: PARTS="grid staleness" (either or both), EPOCHS=2 (grid), HS, CODECS,
#        OUTERS="plain" (grid: add "outer" for outer momentum, --outer-lr 0.7 --outer-momentum
#        0.9, in runs named H<h>-<codec>+outer), FRAGMENTS="1" (grid: "1 4" adds runs with
#        --fragments 4, named H<h>-<codec>+f4; topk is not combined with fragments),
#        STALE_EPOCHS=1, REPEATS=3, BASE_THROTTLE=3, REPEAT_FROM=1 (e.g. REPEAT_FROM=4 REPEATS=5
#        adds two repeats to those already in OUT_DIR), PEER_FLAGS (added to every peer's flags,
#        e.g. PEER_FLAGS="--model cnn:c32k5,p2,c64k5,p2,f1024" for the CNN)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
out="${2:-$here/out/compression}"
epochs="${EPOCHS:-2}"
hs="${HS:-1 4 16 64}"
codecs="${CODECS:-none fp16 int8 int4 topk}"
outers="${OUTERS:-plain}"
fragments="${FRAGMENTS:-1}"
parts="${PARTS:-grid staleness}"
stale_epochs="${STALE_EPOCHS:-1}"
repeats="${REPEATS:-3}"
base="${BASE_THROTTLE:-3}"
slow=$(awk -v b="$base" 'BEGIN { print 5 * b }')
bin="$build/peer/rumor-peer"
[ -x "$bin" ] || { echo "build first: $bin not found" >&2; exit 1; }
mkdir -p "$out"

# run NAME FLAGS-FOR-ALL [FLAGS-FOR-PEER-1 [FLAGS-FOR-PEERS-2-4]]: starts 4 peers, waits,
# leaves NAME/m{1..4}.jsonl
run() {
  local name="$1" all="$2 ${PEER_FLAGS:-}" first="${3:-}" rest="${4:-}"
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
    "$bin" --listen 127.0.0.1:0 --join "$seed" --shard "$k/4" --min-peers 4 --name "p$k" --metrics "$d/m$k.jsonl" $all $rest 2>"$d/p$k.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do timeout 900 tail --pid="$p" -f /dev/null; done
  wait || true
  echo "   $name done"
}

if [[ " $parts " == *" grid "* ]]; then
  echo "== H x codec grid, $epochs epochs each"
  for h in $hs; do
    for c in $codecs; do
      for o in $outers; do
        for f in $fragments; do
          [ "$c" = topk ] && [ "$f" != 1 ] && continue  # topk does not combine with fragments
          suffix="" extra=""
          [ "$f" != 1 ] && suffix="+f$f" extra="--fragments $f"
          case "$o" in
            plain) run "H${h}-${c}${suffix}" "--epochs $epochs --local-steps $h --codec $c --throttle $base $extra" ;;
            outer) run "H${h}-${c}+outer${suffix}" "--epochs $epochs --local-steps $h --codec $c --throttle $base --outer-lr 0.7 --outer-momentum 0.9 $extra" ;;
            *) echo "OUTERS: plain or outer, not $o" >&2; exit 2 ;;
          esac
        done
      done
    done
  done
fi

if [[ " $parts " == *" staleness "* ]]; then
  echo "== staleness: one peer 5x slower ($stale_epochs epoch(s), all peers --throttle $base, the slow one $slow; $repeats repeats)"
  for r in $(seq "${REPEAT_FROM:-1}" "$repeats"); do
    e="--epochs $stale_epochs"
    f="--throttle $base"
    run "stale-unthrottled-r$r" "$e" "$f" "$f"
    run "stale-tauinf-r$r" "$e --staleness inf" "--throttle $slow" "$f"
    run "stale-taugenerous-r$r" "$e --staleness 200" "--throttle $slow" "$f"
    run "stale-tau16-r$r" "$e --staleness 16" "--throttle $slow" "$f"
    run "stale-tau0-r$r" "$e --staleness 0" "--throttle $slow" "$f"
  done
fi

/usr/bin/python3 "$here/bench/compression_report.py" "$out"
