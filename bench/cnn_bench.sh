#!/usr/bin/env bash
# Convolutional-model benchmark of Rumor: see bench/HISTORY.md, "Convolutional models" (current figures: bench/README.md).
#
#   bench/cnn_bench.sh [--build DIR] [--no-build] [--model SPEC] [--rounds N] [--reps N]
#                      [--steps N] [--data DIR] [--openblas auto|off|DIR] [--fetch-openblas]
#                      [--skip-pytorch] [--gossip] [--gossip-model SPEC] [--epochs E]
#                      [--target ACC] [--run-timeout S]
#
# 1. builds bench_train_throughput and rumor-peer in DIR (default: build-bench/) unless --no-build;
# 2. --rounds times (default 3), alternately: bench_train_throughput --model SPEC (Rumor's
#    Trainer::step(), one thread, batch 64; default SPEC cnn:c32k5,p2,c64k5,p2,f1024) and
#    bench/pytorch_cnn.py with the same network, batch and optimizer (torch.set_num_threads(1)),
#    each --reps (5) repetitions of --steps (100) steps; the ratio rumor / pytorch of every round,
#    by wall clock and by process CPU time (steadier on a shared machine). PyTorch gets OpenBLAS
#    as in bench/train_bench.sh when the system gives it the reference BLAS (--openblas,
#    --fetch-openblas: Debian's libopenblas0-serial unpacked into DIR/openblas, nothing installed);
# 3. peak memory: the C++ bench's max RSS (data set + model + every workspace, im2col buffers
#    included) and `rumor-peer --model SPEC --steps 300` under /usr/bin/time -v;
# 4. with --gossip: bench/gossip_bench.sh with --gossip-model (default cnn:c16k5,p2,c32k5,p2,f128),
#    4 peers on loopback, shards 1/4..4/4, --epochs (10), --target (0.91): every peer's final test
#    accuracy, time to the target, wall time and MB sent (one round; expensive on 2 cores);
# then prints one table of medians. Raw outputs are kept in DIR/bench-results/cnn/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-bench"
do_build=1
model="cnn:c32k5,p2,c64k5,p2,f1024"
rounds=3
reps=5
steps=100
data=/usr/share/datasets/fashion-mnist
openblas=auto
fetch_openblas=0
skip_pytorch=0
gossip=0
gossip_model="cnn:c16k5,p2,c32k5,p2,f128"
epochs=10
target=0.91
run_timeout=3600
python="${RUMOR_BENCH_PYTHON:-/usr/bin/python3}"

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --model) model="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --openblas) openblas="$2"; shift 2 ;;
    --fetch-openblas) fetch_openblas=1; shift ;;
    --skip-pytorch) skip_pytorch=1; shift ;;
    --gossip) gossip=1; shift ;;
    --gossip-model) gossip_model="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cnn_bench.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

cores="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
results="$build/bench-results/cnn"
bench="$build/bench/bench_train_throughput"
peer="$build/peer/rumor-peer"

if [[ $do_build == 1 ]]; then
  echo "== build ($build)"
  [[ -f "$build/CMakeCache.txt" ]] ||
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=ON >/dev/null
  ninja -C "$build" bench_train_throughput rumor-peer
fi
[[ -x "$bench" ]] || { echo "cnn_bench.sh: $bench not found (build it, or pass --build DIR)" >&2; exit 1; }
mkdir -p "$results"
rm -f "$results"/*.txt "$results"/*.log "$results"/*.time

val() { awk -v k="$1" '$1 == k { print $2 }' "$2" | tail -n 1; }
median() { printf '%s\n' "$@" | awk 'NF' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.3f", a / b; else printf "n/a" }'; }
fmt() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "") print "n/a"; else printf f "\n", x }'; }

lscpu_model="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
echo "== machine: ${lscpu_model:-unknown CPU}, $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- PyTorch and its BLAS (as in bench/train_bench.sh) ----
pt_note="" pt_env=(env) pt_blas=""
if [[ $skip_pytorch == 1 ]]; then
  pt_note="skipped (--skip-pytorch)"
elif ! "$python" -c 'import torch' 2>/dev/null; then
  pt_note="skipped: $python cannot import torch (Debian: apt-get install python3-torch)"
else
  sys_blas="$("$python" -c 'import torch
print(" ".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libblas" in l or "libopenblas" in l})) or "none")')"
  pt_blas="$sys_blas"
  if [[ $openblas != off && $(realpath -m $sys_blas) != *openblas* ]]; then
    ob_dir=""
    candidates=()
    [[ $openblas == auto ]] || candidates+=("$openblas")
    for v in serial pthread openmp; do
      candidates+=("/usr/lib/x86_64-linux-gnu/openblas-$v" "$build/openblas/usr/lib/x86_64-linux-gnu/openblas-$v")
    done
    for d in "${candidates[@]}"; do [[ -f "$d/libblas.so.3" ]] && { ob_dir="$d"; break; }; done
    if [[ -z $ob_dir && $fetch_openblas == 1 ]]; then
      tmp="$(mktemp -d)"
      (cd "$tmp" && apt-get download libopenblas0-serial >/dev/null 2>&1) || true
      deb="$(ls "$tmp"/libopenblas0-serial_*.deb 2>/dev/null | head -n 1 || true)"
      if [[ -n $deb ]]; then
        mkdir -p "$build/openblas" && dpkg-deb -x "$deb" "$build/openblas"
        ob_dir="$build/openblas/usr/lib/x86_64-linux-gnu/openblas-serial"
      fi
      rm -rf "$tmp"
    fi
    if [[ -n $ob_dir ]]; then
      pt_env=(env "LD_LIBRARY_PATH=$ob_dir")
      pt_blas="OpenBLAS from $ob_dir"
    else
      echo "   PyTorch runs with the system's BLAS ($sys_blas): its dense layers are slow there;" \
           "--fetch-openblas or --openblas DIR for a fair comparison"
    fi
  fi
  echo "== pytorch: BLAS $pt_blas (convolutions: oneDNN when torch has it)"
fi

# ---- rounds ----
r_rumor=() r_rumor_cpu=() r_pt=() r_pt_cpu=() r_ratio=() r_ratio_cpu=()
for ((i = 1; i <= rounds; ++i)); do
  echo "== round $i/$rounds: bench_train_throughput --model $model --reps $reps --steps $steps"
  "$bench" --model "$model" --reps "$reps" --steps "$steps" --warmup 10 --batch 64 --data "$data" \
    | tee "$results/rumor.$i.txt"
  r_rumor+=("$(val rumor_samples_per_s "$results/rumor.$i.txt")")
  r_rumor_cpu+=("$(val rumor_cpu_samples_per_s "$results/rumor.$i.txt")")
  if [[ -z $pt_note ]]; then
    echo "== round $i/$rounds: pytorch_cnn.py --model $model --reps $reps --steps $steps"
    "${pt_env[@]}" "$python" "$here/pytorch_cnn.py" --model "$model" --reps "$reps" --steps "$steps" --warmup 10 \
      --batch 64 --data "$data" | tee "$results/pytorch.$i.txt"
    r_pt+=("$(val pytorch_samples_per_s "$results/pytorch.$i.txt")")
    r_pt_cpu+=("$(val pytorch_cpu_samples_per_s "$results/pytorch.$i.txt")")
    r_ratio+=("$(ratio "${r_rumor[-1]}" "${r_pt[-1]}")")
    r_ratio_cpu+=("$(ratio "${r_rumor_cpu[-1]}" "${r_pt_cpu[-1]}")")
  fi
done
bench_rss="$(val bench_max_rss_kib "$results/rumor.1.txt")"
params="$(val param_count "$results/rumor.1.txt")"

# ---- rumor-peer peak memory ----
peer_rss=""
if [[ -x "$peer" && -x /usr/bin/time ]]; then
  echo "== rumor-peer --model $model --steps 300 (max RSS)"
  /usr/bin/time -v -o "$results/peer.time" "$peer" --model "$model" --steps 300 --eval-every 300 --threads 1 \
    --data "$data" >"$results/peer.log" 2>&1 || echo "   rumor-peer failed: see $results/peer.log"
  peer_rss="$(awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' "$results/peer.time")"
fi

# ---- 4 gossip peers ----
if [[ $gossip == 1 ]]; then
  echo "== 4 gossip peers: $gossip_model, $epochs epochs, target $target (bench/gossip_bench.sh)"
  "$here/gossip_bench.sh" --build "$build" --no-build --rounds 1 --peers 4 --epochs "$epochs" --eval-every 200 \
    --target "$target" --model "$gossip_model" --skip-ddp --skip-exchange --run-timeout "$run_timeout" \
    --data "$data" | tee "$results/gossip.txt"
fi

row() { printf '%-44s %12s   %s\n' "$1" "$2" "${3:-}"; }
echo
echo "== results: $(date -u +%Y-%m-%d), ${lscpu_model:-unknown CPU} ($cores cores), one thread, batch 64, Adam"
echo "   $model ($params parameters); medians over $rounds rounds of (Rumor, PyTorch), each the median of $reps x $steps steps"
row "rumor Trainer::step        samples/s" "$(fmt "$(median "${r_rumor[@]}")" %.1f)" "cpu-time: $(fmt "$(median "${r_rumor_cpu[@]}")" %.1f); rounds: ${r_rumor[*]}"
if [[ -n $pt_note ]]; then
  row "pytorch                    samples/s" "-" "$pt_note"
else
  row "pytorch 1 thread           samples/s" "$(fmt "$(median "${r_pt[@]}")" %.1f)" "cpu-time: $(fmt "$(median "${r_pt_cpu[@]}")" %.1f); rounds: ${r_pt[*]}"
  row "rumor / pytorch (wall)" "$(fmt "$(median "${r_ratio[@]}")" %.3f)" "target >= 1.0; rounds: ${r_ratio[*]}"
  row "rumor / pytorch (CPU time)" "$(fmt "$(median "${r_ratio_cpu[@]}")" %.3f)" "rounds: ${r_ratio_cpu[*]}"
fi
row "bench max RSS (KiB)" "${bench_rss:-n/a}" "data set (219 MB as float32) + model + workspaces"
[[ -z $peer_rss ]] || row "rumor-peer --steps 300 max RSS (KiB)" "$peer_rss"
if [[ $gossip == 1 ]]; then
  grep -E '^   p[0-9]+:' "$results/gossip.txt" || true
  for k in rumor_final_acc_min rumor_final_acc_median rumor_peers_reached rumor_time_to_target_max_s rumor_wall_s \
           rumor_mb_sent_per_peer; do
    row "gossip $k" "$(val "$k" "$build/bench-results/gossip/rumor.1.txt")"
  done
fi
echo "(raw outputs: $results)"
