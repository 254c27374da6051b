#!/usr/bin/env bash
# Single-peer training benchmark of Rumor: see bench/README.md (and bench/HISTORY.md, "Single-peer training benchmark").
#
#   bench/train_bench.sh [--build DIR] [--no-build] [--rounds N] [--reps N] [--steps N]
#                        [--data DIR] [--openblas auto|off|DIR] [--fetch-openblas]
#                        [--accuracy] [--skip-pytorch] [--skip-peer]
#
# 1. builds bench_train_throughput and rumor-peer in DIR (default: build-bench/ at the top of
#    the repository) unless --no-build;
# 2. --rounds times (default 3), alternately: the C++ bench (Rumor's Trainer::step() vs the
#    plain-Eigen GEMM ceiling, --reps interleaved repetitions of --steps steps) and
#    bench/pytorch_mlp.py (same model, same number of steps) with /usr/bin/python3, when
#    `import torch` works there. PyTorch runs with OpenBLAS when the system gives torch the
#    reference BLAS and an OpenBLAS is found (--openblas; --fetch-openblas unpacks Debian's
#    libopenblas0-serial into DIR/openblas, installing nothing); then once more with the
#    system's BLAS, for the record;
# 3. runs `rumor-peer --epochs 1` under /usr/bin/time -v for its peak memory (max RSS);
# 4. with --accuracy, trains 5 epochs with PyTorch and with rumor-peer and reports both final
#    test accuracies;
# then prints one table of medians. Raw outputs are kept in DIR/bench-results/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-bench"
do_build=1
rounds=3
reps=5
steps=300
data=/usr/share/datasets/fashion-mnist
openblas=auto
fetch_openblas=0
accuracy=0
skip_pytorch=0
skip_peer=0
python="${RUMOR_BENCH_PYTHON:-/usr/bin/python3}"  # the Python with torch (Debian: python3-torch)

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --openblas) openblas="$2"; shift 2 ;;
    --fetch-openblas) fetch_openblas=1; shift ;;
    --accuracy) accuracy=1; shift ;;
    --skip-pytorch) skip_pytorch=1; shift ;;
    --skip-peer) skip_peer=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "train_bench.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

cores="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
# One thread everywhere: the machine is shared, and this is a single-thread benchmark.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

results="$build/bench-results"
bench="$build/bench/bench_train_throughput"
peer="$build/peer/rumor-peer"

if [[ $do_build == 1 ]]; then
  echo "== build ($build)"
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=ON >/dev/null
  fi
  targets=(bench_train_throughput)
  [[ $skip_peer == 1 && $accuracy == 0 ]] || targets+=(rumor-peer)
  ninja -C "$build" "${targets[@]}"
fi
[[ -x "$bench" ]] || { echo "train_bench.sh: $bench not found (build it, or pass --build DIR)" >&2; exit 1; }
mkdir -p "$results"
rm -f "$results"/*.txt "$results"/*.log "$results"/*.time

# helpers: `key value` lines -> value; median of numbers; a / b
val() { awk -v k="$1" '$1 == k { print $2 }' "$2" | tail -n 1; }
median() { printf '%s\n' "$@" | awk 'NF' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
median1() { median "$@" | awk 'NF { printf "%.1f\n", $1 }'; }
median3() { median "$@" | awk 'NF { printf "%.3f\n", $1 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.3f", a / b; else printf "n/a" }'; }

lscpu_model="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
echo "== machine: ${lscpu_model:-unknown CPU}, $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- Which PyTorch runs ----
pt_note="" pt_sys_blas="" ob_dir="" pt_main_blas="" pt_main_env=()
blas_of() {  # the BLAS libraries a torch process maps (LD_LIBRARY_PATH as in the environment)
  "$python" -c 'import torch
paths = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libblas" in l or "libopenblas" in l})
print(" ".join(paths) if paths else "none")' 2>/dev/null || echo unknown
}
describe_blas() {  # short name of the BLAS in a list of mapped libraries
  local r f
  r="$(for f in $1; do realpath -m "$f"; done | tr '\n' ' ' | sed 's/ $//')"
  case "$r" in
    *openblas*)
      f="$(printf '%s\n' $r | grep -m1 'openblas-r\|libopenblas' || true)"
      echo "OpenBLAS $(basename "$f" | sed -n 's/.*openblas-r\([0-9.]*\)\.so.*/\1/p') in $(dirname "$f")" ;;
    */blas/libblas.so*) echo "reference BLAS (netlib) $r" ;;
    *) echo "$r" ;;
  esac
}
if [[ $skip_pytorch == 1 ]]; then
  pt_note="skipped (--skip-pytorch)"
elif ! err="$("$python" -c 'import torch' 2>&1)"; then
  pt_note="skipped: '$python -c \"import torch\"' failed${err:+: $(printf '%s' "$err" | tail -n 1)} (Debian: apt-get install python3-torch)"
  echo "== pytorch $pt_note"
else
  pt_sys_blas="$(describe_blas "$(blas_of)")"
  echo "== pytorch: the system gives torch $pt_sys_blas"
  if [[ $openblas != off && $pt_sys_blas != OpenBLAS* ]]; then
    candidates=()
    [[ $openblas == auto ]] || candidates+=("$openblas")
    for v in serial pthread openmp; do
      candidates+=("/usr/lib/x86_64-linux-gnu/openblas-$v" "$build/openblas/usr/lib/x86_64-linux-gnu/openblas-$v")
    done
    for d in "${candidates[@]}"; do
      if [[ -f "$d/libblas.so.3" ]]; then ob_dir="$d"; break; fi
    done
    if [[ -z $ob_dir && $fetch_openblas == 1 ]]; then
      echo "== fetching libopenblas0-serial (apt-get download, unpacked into $build/openblas; nothing installed)"
      tmp="$(mktemp -d)"
      (cd "$tmp" && apt-get download libopenblas0-serial >/dev/null 2>&1) || true
      deb="$(ls "$tmp"/libopenblas0-serial_*.deb 2>/dev/null | head -n 1 || true)"
      if [[ -n $deb ]]; then
        mkdir -p "$build/openblas" && dpkg-deb -x "$deb" "$build/openblas"
        ob_dir="$build/openblas/usr/lib/x86_64-linux-gnu/openblas-serial"
      else
        echo "   could not download libopenblas0-serial"
      fi
      rm -rf "$tmp"
    fi
    if [[ -z $ob_dir ]]; then
      echo "   no OpenBLAS found: PyTorch runs with the system's BLAS only (--fetch-openblas or --openblas DIR to compare with OpenBLAS)"
    fi
  fi
  if [[ -n $ob_dir ]]; then
    pt_main_env=(env "LD_LIBRARY_PATH=$ob_dir")
    pt_main_blas="$(describe_blas "$(LD_LIBRARY_PATH="$ob_dir" blas_of)")"
  else
    pt_main_env=(env)
    pt_main_blas="$pt_sys_blas"
  fi
fi

# ---- Rounds: C++ bench, then PyTorch, alternately ----
r_rumor=() r_ceiling=() r_ratio=() r_pt=() r_ptratio=() r_ptratio_cpu=()
for ((i = 1; i <= rounds; ++i)); do
  extra=()
  [[ $i == 1 ]] || extra=(--no-breakdown)  # the breakdown once is enough
  echo "== round $i/$rounds: $bench --reps $reps --steps $steps ${extra[*]}"
  "$bench" --reps "$reps" --steps "$steps" --batch 64 --data "$data" "${extra[@]}" \
    | tee "$results/train_throughput.$i.txt"
  r_rumor+=("$(val rumor_samples_per_s "$results/train_throughput.$i.txt")")
  r_ceiling+=("$(val ceiling_samples_per_s "$results/train_throughput.$i.txt")")
  r_ratio+=("$(val ratio_to_ceiling "$results/train_throughput.$i.txt")")
  if [[ -z $pt_note ]]; then
    echo "== round $i/$rounds: pytorch_mlp.py --reps $reps --steps $steps [$pt_main_blas]"
    "${pt_main_env[@]}" "$python" "$here/pytorch_mlp.py" --reps "$reps" --steps "$steps" --batch 64 \
      --data "$data" | tee "$results/pytorch.$i.txt"
    r_pt+=("$(val pytorch_samples_per_s "$results/pytorch.$i.txt")")
    r_ptratio+=("$(ratio "${r_rumor[-1]}" "${r_pt[-1]}")")
    r_ptratio_cpu+=("$(ratio "$(val rumor_cpu_samples_per_s "$results/train_throughput.$i.txt")" \
                           "$(val pytorch_cpu_samples_per_s "$results/pytorch.$i.txt")")")
  fi
done
rumor_sps="$(median1 "${r_rumor[@]}")"
ceiling_sps="$(median1 "${r_ceiling[@]}")"
ceiling_ratio="$(median3 "${r_ratio[@]}")"
params="$(val param_count "$results/train_throughput.1.txt")"
pt_sps="" pt_ratio="" pt_ratio_cpu="" pt_sys_sps=""
if [[ -z $pt_note ]]; then
  pt_sps="$(median1 "${r_pt[@]}")"
  pt_ratio="$(median3 "${r_ptratio[@]}")"
  pt_ratio_cpu="$(median3 "${r_ptratio_cpu[@]}")"
  if [[ -n $ob_dir ]]; then
    echo "== pytorch_mlp.py once with the system's BLAS [$pt_sys_blas]"
    "$python" "$here/pytorch_mlp.py" --reps "$reps" --steps "$steps" --batch 64 --data "$data" \
      | tee "$results/pytorch_system_blas.txt"
    pt_sys_sps="$(val pytorch_samples_per_s "$results/pytorch_system_blas.txt")"
  fi
fi

# ---- rumor-peer: peak memory of one epoch ----
peer_rss_kib="" peer_line="" peer_acc="" pt_acc=""
max_rss_run() {  # max_rss_run LOG CMD...: stdout+stderr to LOG; sets rss_kib
  local log="$1"; shift
  if [[ -x /usr/bin/time ]]; then
    /usr/bin/time -v -o "$log.time" "$@" >"$log" 2>&1
    rss_kib="$(awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' "$log.time")"
  else  # no GNU time: the child's getrusage from Python
    rss_kib="$("$python" -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as f: subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$log" "$@")"
  fi
}
if [[ $skip_peer == 0 ]]; then
  [[ -x "$peer" ]] || { echo "train_bench.sh: $peer not found (build rumor-peer, or pass --skip-peer)" >&2; exit 1; }
  echo "== $peer --epochs 1 --threads 1 (max RSS)"
  max_rss_run "$results/peer_epochs1.log" "$peer" --epochs 1 --threads 1 --data "$data"
  peer_line="$(grep 'done:' "$results/peer_epochs1.log" | tail -n 1 | sed 's/.*done:/done:/' || true)"
  peer_rss_kib="$rss_kib"
  echo "   $peer_line; max RSS $peer_rss_kib KiB"
fi

# ---- 5-epoch accuracies ----
if [[ $accuracy == 1 ]]; then
  if [[ -z $pt_note ]]; then
    echo "== pytorch_mlp.py --epochs 5 [$pt_main_blas]"
    "${pt_main_env[@]}" "$python" "$here/pytorch_mlp.py" --epochs 5 --data "$data" | tee "$results/pytorch_epochs5.txt"
    pt_acc="$(val pytorch_test_acc "$results/pytorch_epochs5.txt")"
  fi
  echo "== $peer --epochs 5 --threads 1"
  "$peer" --epochs 5 --threads 1 --data "$data" 2>&1 | tee "$results/peer_epochs5.log"
  peer_acc="$(grep 'final' "$results/peer_epochs5.log" | tail -n 1 | sed -n 's/.*test_acc \([0-9.]*\).*/\1/p' || true)"
fi

# ---- table ----
data_bytes=$(( (60000 + 10000) * 784 * 4 ))
row() { printf '%-40s %12s   %s\n' "$1" "$2" "${3:-}"; }
echo
echo "== results: $(date -u +%Y-%m-%d), ${lscpu_model:-unknown CPU} ($cores cores), one thread, batch 64;"
echo "   medians over $rounds rounds of (C++ bench, PyTorch), each the median of $reps reps x $steps steps"
row "rumor Trainer::step   samples/s" "${rumor_sps:-n/a}" "rounds: ${r_rumor[*]}"
row "Eigen GEMM ceiling    samples/s" "${ceiling_sps:-n/a}" "rounds: ${r_ceiling[*]}"
row "rumor / ceiling" "${ceiling_ratio:-n/a}" "target >= 0.80; rounds: ${r_ratio[*]}"
if [[ -n $pt_note ]]; then
  row "pytorch               samples/s" "-" "$pt_note"
else
  row "pytorch               samples/s" "${pt_sps:-n/a}" "[$pt_main_blas] rounds: ${r_pt[*]}"
  row "rumor / pytorch" "${pt_ratio:-n/a}" "target >= 1.3; rounds: ${r_ptratio[*]}"
  row "rumor / pytorch, by CPU time" "${pt_ratio_cpu:-n/a}" "rounds: ${r_ptratio_cpu[*]}"
  if [[ -n $pt_sys_sps ]]; then
    row "pytorch, system BLAS  samples/s" "$pt_sys_sps" "[$pt_sys_blas] one run"
    row "rumor / pytorch (system BLAS)" "$(ratio "$rumor_sps" "$pt_sys_sps")"
  fi
fi
if [[ -n $peer_rss_kib ]]; then
  row "rumor-peer --epochs 1 max RSS (KiB)" "$peer_rss_kib" \
    "$(awk -v k="$peer_rss_kib" 'BEGIN { printf "%.1f MiB", k / 1024 }')"
  row "data set in memory (bytes)" "$data_bytes" \
    "$(awk -v b="$data_bytes" 'BEGIN { printf "%.1f MiB: (60000 + 10000) x 784 float32", b / 1048576 }')"
  row "max RSS / data set" "$(ratio "$((peer_rss_kib * 1024))" "$data_bytes")"
  row "parameters" "${params:-n/a}" "$(awk -v p="${params:-0}" 'BEGIN { printf "%.2f MiB float32; x4 with gradient and Adam m, v", p * 4 / 1048576 }')"
  row "rumor-peer --epochs 1" "" "$peer_line"
fi
[[ -z $pt_acc ]] || row "pytorch --epochs 5 test accuracy" "$pt_acc"
[[ -z $peer_acc ]] || row "rumor-peer --epochs 5 test accuracy" "$peer_acc"
echo "(raw outputs: $results)"
