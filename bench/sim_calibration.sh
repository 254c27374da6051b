#!/usr/bin/env bash
# Sim against reality (docs/sim.md, "Calibration"): does rumor-sim predict the quickstart?
#
#   bench/sim_calibration.sh [--build DIR] [--no-build] [--real DIR] [--out DIR] [--epochs E]
#
# 1. builds rumor-sim and rumor-peer in DIR (default: build-sim/ at the top of the repository);
# 2. `rumor-sim --calibrate --procs 4`: this machine's step time with 4 processes at once,
#    exchange CPU, evaluation time, loading time, loopback bandwidth and latency -> OUT/calib.ini;
# 3. the real quickstart: 4 rumor-peer on 127.0.0.1 started exactly as examples/quickstart.sh
#    starts them (p1 first, the others joining through it once it listens), metrics in
#    OUT/real/p*.jsonl; or, with --real DIR, the p*.jsonl of a run already made there
#    (examples/quickstart.sh writes out/quickstart/);
# 4. the simulated quickstart: examples/sim/quickstart.ini with the calibration included, and
#    the joiners started after the loading time the calibration measured for 3 processes
#    loading at once while one trains -> OUT/sim/;
# 5. bench/sim_compare.py: each peer's training wall time (the daemon's `done.wall_s` against
#    the simulated one) and its test accuracy at every evaluation (start, each epoch, end).
# Calibrate and run the real peers back to back: other load on the machine moves both.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-sim"
do_build=1
real=""
out="$repo/out/sim-calibration"
epochs=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --real) real="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim_calibration.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=1
if [[ $do_build == 1 ]]; then
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=OFF >/dev/null
  ninja -C "$build" rumor-sim rumor-peer
fi
sim="$build/sim/rumor-sim"
peer="$build/peer/rumor-peer"
mkdir -p "$out"

echo "== calibration (4 processes at once)"
"$sim" --calibrate --procs 4 --calibrate-out "$out/calib.ini"
cat "$out/calib.ini"
joiners=$(sed -n 's/^# joiner_load_s = \([0-9.]*\).*/\1/p' "$out/calib.ini")

if [[ -z "$real" ]]; then
  real="$out/real"
  rm -rf "$real"
  mkdir -p "$real"
  echo "== the real quickstart: 4 rumor-peer, $epochs epochs (logs in $real)"
  pids=()
  cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
  trap cleanup EXIT INT TERM
  t0=$(date +%s.%N)
  "$peer" --listen 127.0.0.1:0 --shard 1/4 --epochs "$epochs" --name p1 --metrics "$real/p1.jsonl" 2>"$real/p1.log" &
  pids+=($!)
  seed=""
  for _ in $(seq 1 600); do
    seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$real/p1.log" 2>/dev/null | awk '{print $3}' | head -1 || true)
    [[ -n "$seed" ]] && break
    sleep 0.05
  done
  [[ -n "$seed" ]] || { echo "p1 did not start listening" >&2; exit 1; }
  for k in 2 3 4; do
    "$peer" --listen 127.0.0.1:0 --join "$seed" --shard "$k/4" --epochs "$epochs" --name "p$k" \
      --metrics "$real/p$k.jsonl" 2>"$real/p$k.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
  t1=$(date +%s.%N)
  echo "   real run: $(echo "$t1 - $t0" | bc) s from the first launch to the last exit"
fi

echo "== the simulated quickstart"
cat > "$out/quickstart-calibrated.ini" <<INI
include = $repo/examples/sim/quickstart.ini
include = $out/calib.ini
INI
"$sim" "$out/quickstart-calibrated.ini" --out "$out/sim" --set "workload.epochs=$epochs" \
  --set "class.joiners.start=$joiners"

echo "== comparison"
/usr/bin/python3 "$here/sim_compare.py" --real "$real" --sim "$out/sim" | tee "$out/comparison.txt"
