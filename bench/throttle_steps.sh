#!/usr/bin/env bash
# How many steps a throttled rumor-peer takes against the others' under a swarm-wide budget
# (issue 35): N peers on loopback training Fashion-MNIST mlp:256,128 with --swarm-epochs E, the
# last at --throttle SLOW, the others at --throttle FAST. Prints each round's steps and the
# ratio (the slow peer's steps over the others' mean), then the median. bench/HISTORY.md
# "A swarm-wide budget" has the figures and why they depend on how many cores the peers share.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build"; peers=4; fast=1; slow=4; local_steps=1; epochs=3; rounds=3
out="$here/out/throttle-steps"; data=/usr/share/datasets/fashion-mnist
usage() {
  cat <<USAGE
usage: bench/throttle_steps.sh [--build DIR] [--peers N] [--fast F] [--slow S] [--local-steps H]
                               [--swarm-epochs E] [--rounds R] [--out DIR]
  N peers (default 4), the last at --throttle S (default 4), the others at F (default 1: none);
  --local-steps H (default 1), --swarm-epochs E (default 3), R rounds (default 3).
USAGE
}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;; --peers) peers="$2"; shift 2 ;; --fast) fast="$2"; shift 2 ;;
    --slow) slow="$2"; shift 2 ;; --local-steps) local_steps="$2"; shift 2 ;;
    --swarm-epochs) epochs="$2"; shift 2 ;; --rounds) rounds="$2"; shift 2 ;; --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "throttle_steps.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
bin="$build/peer/rumor-peer"
[ -x "$bin" ] || { echo "throttle_steps.sh: $bin not found: build first (cmake --build $build)" >&2; exit 1; }
[ -d "$data" ] || { echo "throttle_steps.sh: $data not found (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
[ "$peers" -ge 2 ] || { echo "throttle_steps.sh: --peers must be at least 2" >&2; exit 2; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
echo "== $peers peers, the last at --throttle $slow, the others at $fast; --local-steps $local_steps, --swarm-epochs $epochs; $(nproc) cores"
for r in $(seq 1 "$rounds"); do
  dir="$out/round$r"; rm -rf "$dir"; mkdir -p "$dir"; pids=()
  for k in $(seq 1 "$peers"); do
    t=$fast; [ "$k" -eq "$peers" ] && t=$slow
    join=(); [ "$k" -gt 1 ] && join=(--join "$seed")
    "$bin" --listen 127.0.0.1:0 "${join[@]}" --data "$data" --shard "$k/$peers" --swarm-epochs "$epochs" \
      --min-peers "$peers" --lr-schedule wsd --local-steps "$local_steps" --throttle "$t" --name "p$k" \
      --metrics "$dir/p$k.jsonl" 2>"$dir/p$k.log" &
    pids+=($!)
    if [ "$k" -eq 1 ]; then
      seed=""
      for _ in $(seq 1 300); do
        seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$dir/p1.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
        [ -n "$seed" ] && break; sleep 0.1
      done
      [ -n "$seed" ] || { echo "throttle_steps.sh: p1 did not start listening; see $dir/p1.log" >&2; exit 1; }
    fi
  done
  rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; pids=()
  [ $rc -eq 0 ] || { echo "throttle_steps.sh: a peer failed; see $dir/p*.log" >&2; exit 1; }
  /usr/bin/python3 - "$dir" "$peers" "$r" <<'PY'
import json, sys
d, n, r = sys.argv[1], int(sys.argv[2]), sys.argv[3]
done = [next(json.loads(l) for l in open(f"{d}/p{k}.jsonl") if '"event":"done"' in l) for k in range(1, n + 1)]
steps = [x["steps"] for x in done]
ratio = steps[-1] / (sum(steps[:-1]) / (n - 1))
accs = [x["test_acc"] for x in done]
print(f"round {r}: steps {steps}, ratio {ratio:.3f}; test_acc {min(accs):.4f}-{max(accs):.4f}")
open(f"{d}/ratio", "w").write(f"{ratio}\n")
PY
done
/usr/bin/python3 -c "
import statistics, sys
r = [float(open(f'$out/round{k}/ratio').read()) for k in range(1, $rounds + 1)]
print(f'median ratio over {len(r)} rounds: {statistics.median(r):.3f} (expected 1/{float(\"$slow\") / float(\"$fast\"):g} of the steps where no peer waits for a core)')"
