#!/usr/bin/env bash
# The partial views' properties at the sizes of issue 30 (docs/sim.md, "Partial views"), with
# bench_sim_overlay (bench/sim_overlay.cpp): pure averaging, joining through p0, view partial.
#
#   bench/overlay_properties.sh [--build DIR] [--no-build] [--out DIR]
#       [--connectivity-sizes "1000 10000"] [--seeds K] [--minutes M]
#       [--detection-sizes "1000 10000 100000"]
#
# connectivity: churn of 1% of the peers per second (crashes and joins at once) for M minutes
#   (default 10) at each size and seeds 1..K (default 100): prints, per run, the samples (one a
#   second) and how many found the live overlay split; the target is 0 in every run.
# detection: 20 peers crash at once at each size; the time until no live active view holds
#   each; the target is a p99 within 20% from the smallest size to the largest.
# Every run also prints its CPU seconds and peak RSS. The simulator is single-threaded; runs
# go one after another. The table is in OUT/overlay.txt.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build"
do_build=1
out="$repo/out/overlay"
conn_sizes="1000 10000"
seeds=100
minutes=10
det_sizes="1000 10000 100000"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --connectivity-sizes) conn_sizes="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --detection-sizes) det_sizes="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "overlay_properties.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if [[ $do_build == 1 ]]; then
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=ON >/dev/null
  cmake --build "$build" --target bench_sim_overlay
fi
bin="$build/sim/bench_sim_overlay"
[[ -x "$bin" ]] || { echo "overlay_properties.sh: $bin not built (configure with -DRUMOR_BENCH=ON)" >&2; exit 1; }
mkdir -p "$out"
table="$out/overlay.txt"
: > "$table"
for n in $det_sizes; do
  "$bin" detection "$n" 1 | tee -a "$table"
done
for n in $conn_sizes; do
  split_runs=0
  for seed in $(seq 1 "$seeds"); do
    line=$("$bin" connectivity "$n" "$seed" "$minutes" | tee -a "$table" | grep '^connectivity')
    echo "$line"
    split=$(echo "$line" | sed -n 's/.*not_connected \([0-9]*\).*/\1/p')
    [[ "$split" == 0 ]] || split_runs=$((split_runs + 1))
  done
  echo "connectivity n $n: $split_runs of $seeds runs found the overlay split at some sample" | tee -a "$table"
done
echo "table in $table"
