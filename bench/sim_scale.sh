#!/usr/bin/env bash
# How rumor-sim scales (docs/sim.md, "Performance"): examples/sim/scale.ini (logistic
# regression on Fashion-MNIST shards, 100 local steps = 100 exchanges started per peer) at
# several swarm sizes, each under /usr/bin/time: wall time, CPU time, peak memory, events and
# events per second of CPU.
#
#   bench/sim_scale.sh [--build DIR] [--no-build] [--peers "100 300 1000 3000"] [--steps N]
#                      [--out DIR] [--max-rss-gb G] [--averaging]
#
# --averaging: examples/sim/scale_averaging.ini instead (pure averaging, training off, a
# 16-float model, partial views; issue 30's target: 100,000 peers x 100 exchanges in at most
# 10 minutes of one core and 4 GB), with memory predicted to grow linearly.
#
# The simulator is single-threaded: CPU time is what one core spends; wall time equals it on
# an idle machine. Sizes whose predicted peak memory exceeds --max-rss-gb (default: half the
# machine's memory) are skipped: memory grows with the square of the swarm (every peer's view
# holds every member, core/view.hpp).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-sim"
do_build=1
sizes="100 300 1000 3000"
steps=100
scenario="$repo/examples/sim/scale.ini"
growth=2  # memory grows with the square of the swarm with full views, linearly with partial ones
out="$repo/out/sim-scale"
mem_kb=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
max_rss_gb=$(( mem_kb / 2 / 1024 / 1024 ))
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --peers) sizes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --max-rss-gb) max_rss_gb="$2"; shift 2 ;;
    --averaging) scenario="$repo/examples/sim/scale_averaging.ini"; growth=1; shift ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim_scale.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS=1
if [[ $do_build == 1 ]]; then
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=OFF >/dev/null
  ninja -C "$build" rumor-sim
fi
sim="$build/sim/rumor-sim"
mkdir -p "$out"
table="$out/scale.txt"
printf "%8s %10s %10s %10s %12s %12s %14s\n" peers wall_s cpu_s rss_MB events events/cpu_s final_acc | tee "$table"
prev_n=""; prev_rss=""
for n in $sizes; do
  if [[ -n "$prev_n" ]]; then
    # Growth from the last size measured.
    predicted=$(echo "$prev_rss * ($n / $prev_n)^$growth / 1024" | bc -l)
    if (( $(echo "$predicted > $max_rss_gb * 1024" | bc -l) )); then
      printf "%8s   skipped: about %.0f GB predicted (> --max-rss-gb %s)\n" "$n" "$(echo "$predicted / 1024" | bc -l)" "$max_rss_gb" | tee -a "$table"
      continue
    fi
  fi
  d="$out/n$n"
  /usr/bin/time -v "$sim" "$scenario" --set "run.peers=$n" --set "workload.steps=$steps" \
    --out "$d" 2> "$d.time" >/dev/null || { echo "rumor-sim failed at $n peers: see $d.time" >&2; exit 1; }
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$d.time" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  user=$(awk -F': ' '/User time/ {print $2}' "$d.time")
  sys=$(awk -F': ' '/System time/ {print $2}' "$d.time")
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$d.time")
  events=$(sed -n 's/.*"events": \([0-9]*\).*/\1/p' "$d/summary.json")
  acc=$(sed -n 's/.*"final": {.*"test_acc": \([0-9.]*\).*/\1/p' "$d/summary.json")
  cpu=$(echo "$user + $sys" | bc -l)
  printf "%8s %10.1f %10.1f %10.0f %12s %12.0f %14s\n" "$n" "$wall" "$cpu" "$(echo "$rss / 1024" | bc -l)" "$events" \
    "$(echo "$events / $cpu" | bc -l)" "$acc" | tee -a "$table"
  prev_n=$n; prev_rss=$(echo "$rss / 1024" | bc -l)
done
echo "table in $table"
