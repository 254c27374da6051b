#!/usr/bin/env bash
# Sim against reality (docs/sim.md, "Calibration"): does rumor-sim predict the quickstart?
#
#   bench/sim_calibration.sh [--build DIR] [--no-build] [--real DIR] [--out DIR] [--epochs E] [--check F]
#
# 1. builds rumor-sim and rumor-peer in DIR (default: build-sim/ at the top of the repository);
# 2. `rumor-sim --calibrate --procs 4`: this machine's step time with 4 processes at once,
#    exchange CPU, evaluation time, loading time (alone, and 3 at once), loopback bandwidth and
#    latency -> OUT/calib.ini (with a real run, once before it and once after, and the mean of
#    the two: the machine's speed drifts);
# 3. the real quickstart: examples/quickstart.sh itself (its peers' flags come from
#    examples/sim/quickstart.ini), metrics in OUT/real/p*.jsonl; or, with --real DIR, the
#    p*.jsonl of a run already made there (examples/quickstart.sh writes out/quickstart/);
# 4. the simulated quickstart: the same examples/sim/quickstart.ini with the calibration
#    included, the first peer listening after load_time_s and the joiners after it plus
#    joiner_load_s -> OUT/sim/;
# 5. bench/sim_compare.py: each peer's wall time (from the start of training, and from launch)
#    and its test accuracy against steps and at the end; with --check F it exits 1 when a wall
#    time is more than F off (e.g. 0.3) or the accuracy misses its targets by more than that.
# Calibrate and run the real peers back to back: other load on the machine moves both.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-sim"
do_build=1
real=""
out="$repo/out/sim-calibration"
epochs=3
check=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --real) real="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --check) check="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# A joiner's process start before it loads anything (the dynamic loader: cuBLAS in a CUDA
# build), 3 at once as the quickstart launches them: the median of 3 tries.
startup=$(for _ in 1 2 3; do
  t0=$(date +%s.%N)
  for _ in 1 2 3; do "$peer" --version >/dev/null & done
  wait
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }'
done | sort -n | sed -n 2p)
echo "   process start of 3 at once: $startup s"

if [[ -z "$real" ]]; then
  real="$out/real"
  echo "== the real quickstart: examples/quickstart.sh, $epochs epoch(s) (logs in $real)"
  t0=$(date +%s.%N)
  BUILD="$build" EPOCHS="$epochs" bash "$repo/examples/quickstart.sh" "$real" >"$out/quickstart.log" 2>&1 ||
    { tail -n 30 "$out/quickstart.log" >&2; echo "the real quickstart failed (log: $out/quickstart.log)" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "   real run: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s from the first launch to the last exit"
  # The machine's speed drifts by tens of percent within minutes here (other VMs share the
  # host): calibrate again right after the real run, and predict it from the mean of the two.
  echo "== calibration again, after the real run (the prediction uses the mean of both)"
  mv "$out/calib.ini" "$out/calib-before.ini"
  "$sim" --calibrate --procs 4 --calibrate-out "$out/calib-after.ini"
  /usr/bin/python3 - "$out/calib-before.ini" "$out/calib-after.ini" > "$out/calib.ini" <<'PY'
import re, sys
a, b = (open(f).read().splitlines() for f in sys.argv[1:3])
num = re.compile(r"^(#? ?[a-z_]+ = )([0-9.eE+-]+)(.*)$")
print("# The mean of two calibrations, before and after the real run:", sys.argv[1], sys.argv[2])
for x, y in zip(a, b):
    mx, my = num.match(x), num.match(y)
    if mx and my and mx.group(1) == my.group(1):
        v = (float(mx.group(2)) + float(my.group(2))) / 2
        print(f"{mx.group(1)}{v:.6g}{mx.group(3)}")
    else:
        print(x)
PY
  grep -E '^(step_time|exchange_cpu|eval_time|time_slice|# load_time_s|# joiner_load_s)' "$out/calib-before.ini" "$out/calib-after.ini" | sed 's/^/   /'
fi
load=$(sed -n 's/^# load_time_s = \([0-9.]*\).*/\1/p' "$out/calib.ini")
joiners=$(sed -n 's/^# joiner_load_s = \([0-9.]*\).*/\1/p' "$out/calib.ini")
echo "   loading: $load s alone, $joiners s for 3 at once"

echo "== the simulated quickstart"
cat > "$out/quickstart-calibrated.ini" <<INI
include = $repo/examples/sim/quickstart.ini
include = $out/calib.ini
INI
# The first peer's clock starts when its process writes its metrics (after its own process
# start); the joiners are launched when it listens (the script looks every 0.1 s), start their
# processes, then load.
"$sim" "$out/quickstart-calibrated.ini" --out "$out/sim" --set "workload.epochs=$epochs" --set "class.first.start=$load" \
  --set "class.joiners.start=$(awk -v a="$load" -v b="$joiners" -v c="$startup" 'BEGIN { printf "%.3f", a + 0.05 + c + b }')"

echo "== comparison"
set +e
/usr/bin/python3 "$here/sim_compare.py" --real "$real" --sim "$out/sim" ${check:+--check "$check"} > "$out/comparison.txt"
rc=$?
set -e
cat "$out/comparison.txt"
exit $rc
