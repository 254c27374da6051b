#!/usr/bin/env bash
# Outer momentum for gossip (gossip-DiLoCo, core/outer.hpp), studied in rumor-sim first: the
# quickstart (examples/sim/quickstart.ini: 4 peers, Fashion-MNIST, mlp:256,128, Adam 1e-3,
# 3 epochs) with an exchange every H local steps, plain gossip against outer momentum
# (--outer-lr / --outer-momentum), and the simulator's lockstep `diloco` baseline (exact
# averages every H rounds, the same outer step) at the same H. Prints one row per H and
# setting: the final test accuracy of the average model and the lowest peer's (medians over
# SEEDS), and bytes per peer.
# Usage: bench/outer_momentum_study.sh [BUILD_DIR] [OUT_DIR]
#   env: HS="16 64 256", SEEDS="1 2 3", SETTINGS="plain o0.7m0.9 o1m0.5 diloco"
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
out="${2:-$here/out/outer_momentum}"
hs="${HS:-16 64 256}"
seeds="${SEEDS:-1 2 3}"
settings="${SETTINGS:-plain o0.7m0.9 o1m0.5 diloco}"
sim="$build/sim/rumor-sim"
[ -x "$sim" ] || { echo "build first: $sim not found (cmake --build $build --target rumor-sim)" >&2; exit 1; }
mkdir -p "$out"
flags_of() {  # setting -> rumor-sim --set flags
  case "$1" in
    plain) echo "" ;;
    # the baselines simulate neither shared cores nor per-peer evaluations
    diloco) echo "--set algorithm.kind=diloco --set compute.shared_cores=0 --set output.peer_evals=off" ;;
    o*m*) local s="${1#o}"; echo "--set gossip.outer_lr=${s%%m*} --set gossip.outer_momentum=${s#*m}" ;;
    *) echo "unknown setting $1 (plain, diloco or oLRmMU, e.g. o0.7m0.9)" >&2; exit 2 ;;
  esac
}
total=0
for h in $hs; do for s in $settings; do for seed in $seeds; do total=$((total + 1)); done; done; done
k=0
for h in $hs; do
  for s in $settings; do
    for seed in $seeds; do
      k=$((k + 1))
      d="$out/H$h-$s-seed$seed"
      if [ ! -f "$d/summary.json" ]; then
        echo "[$k/$total] H=$h $s seed $seed" >&2
        # shellcheck disable=SC2046
        "$sim" "$here/examples/sim/quickstart.ini" --seed "$seed" --set gossip.local_steps="$h" $(flags_of "$s") \
          --out "$d" >"$d.log" 2>&1 || { echo "rumor-sim failed: $d.log" >&2; tail -n 5 "$d.log" >&2; exit 1; }
      fi
    done
  done
done
/usr/bin/python3 - "$out" "$hs" "$settings" "$seeds" <<'PY'
import csv, json, os, statistics, sys
out, hs, settings, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def row(d):
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(d, "timeseries.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    acc = float(s.get("final_test_acc", last["test_acc"]))
    low = float(last.get("peer_acc_min") or "nan")
    mb = float(s.get("bytes", 0)) / 1e6 / 4
    return acc, low, mb
print(f"{'H':>4} {'setting':<10} {'avg model acc':>14} {'lowest peer':>12} {'MB/peer':>9}   (medians over seeds {' '.join(seeds)})")
base = {}
for h in hs:
    for s in settings:
        r = [row(os.path.join(out, f"H{h}-{s}-seed{seed}")) for seed in seeds]
        acc, low, mb = (statistics.median(x[i] for x in r) for i in range(3))
        if s == "plain": base[h] = acc
        gain = f"{(acc - base[h]) * 100:+.2f} pts vs plain" if h in base and s != "plain" else ""
        print(f"{h:>4} {s:<10} {acc:>14.4f} {low:>12.4f} {mb:>9.1f}   {gain}")
PY
