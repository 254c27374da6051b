#!/usr/bin/env bash
# Gossip benchmark of Rumor: see bench/HISTORY.md, "Gossip over TCP" (current figures: bench/README.md).
#
#   bench/gossip_bench.sh [--build DIR] [--no-build] [--rounds N] [--peers N] [--epochs E]
#                         [--eval-every N] [--target ACC] [--data DIR] [--model SPEC] [--lr X]
#                         [--peer-args "FLAGS"]
#                         [--openblas auto|off|DIR] [--fetch-openblas] [--run-timeout S]
#                         [--exchange-args "ARGS"] [--skip-exchange] [--skip-rumor] [--skip-ddp]
#
# 1. builds rumor-peer and bench_exchange_throughput in DIR (default: build-bench/ at the top
#    of the repository) unless --no-build;
# 2. runs bench_exchange_throughput once (two Gossip peers exchanging 100 MB models over the
#    real transport on loopback, interleaved with a plain TCP copy of the same bytes);
# 3. --rounds times (default 3), one after the other, never at the same time:
#    - the quickstart configuration: --peers (4) rumor-peer processes on 127.0.0.1, shards
#      1/N..N/N, the default model (mlp:256,128; or --model SPEC, e.g. a cnn: spec, which the
#      DDP side does not build: pass --skip-ddp with it), Adam --lr (1e-3), batch 64, --epochs (3) epochs,
#      plus any --peer-args (e.g. "--lr-schedule cosine"),
#      --min-peers N, --eval-every (50); from the metrics files: each peer's wall time from
#      the start of training (its first eval line) to its first eval with test_acc >= --target
#      (0.85), the MB it sent, its final accuracy;
#    - bench/ddp_fmnist.py: PyTorch DDP (gloo, N processes, one thread each) with the same
#      model, optimizer, batch and epochs, when `/usr/bin/python3 -c 'import torch'` works,
#      with OpenBLAS when the system gives torch the reference BLAS and an OpenBLAS is found
#      (--openblas; --fetch-openblas unpacks Debian's libopenblas0-serial into DIR/openblas,
#      installing nothing; as in bench/train_bench.sh);
# then prints one table of medians over the rounds. Every run is bounded by --run-timeout
# seconds (default 600). Raw outputs are kept in DIR/bench-results/gossip/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build-bench"
do_build=1
rounds=3
peers=4
epochs=3
eval_every=50
target=0.85
data=/usr/share/datasets/fashion-mnist
openblas=auto
fetch_openblas=0
run_timeout=600
exchange_args=""
skip_exchange=0
skip_rumor=0
skip_ddp=0
model=""
lr=""
peer_args=""
python="${RUMOR_BENCH_PYTHON:-/usr/bin/python3}"  # the Python with torch (Debian: python3-torch)

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --eval-every) eval_every="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --peer-args) peer_args="$2"; shift 2 ;;
    --openblas) openblas="$2"; shift 2 ;;
    --fetch-openblas) fetch_openblas=1; shift ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    --exchange-args) exchange_args="$2"; shift 2 ;;
    --skip-exchange) skip_exchange=1; shift ;;
    --skip-rumor) skip_rumor=1; shift ;;
    --skip-ddp) skip_ddp=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gossip_bench.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

cores="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
# One math thread per process everywhere: N processes of each system share the machine.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

results="$build/bench-results/gossip"
peer="$build/peer/rumor-peer"
xbench="$build/bench/bench_exchange_throughput"

if [[ $do_build == 1 ]]; then
  echo "== build ($build)"
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUMOR_BENCH=ON >/dev/null
  fi
  targets=()
  [[ $skip_rumor == 1 ]] || targets+=(rumor-peer)
  [[ $skip_exchange == 1 ]] || targets+=(bench_exchange_throughput)
  [[ ${#targets[@]} == 0 ]] || ninja -C "$build" "${targets[@]}"
fi
mkdir -p "$results"
rm -rf "${results:?}"/*

# helpers: `key value` lines -> value; median of numbers; a / b
val() { awk -v k="$1" '$1 == k { print $2 }' "$2" 2>/dev/null | tail -n 1; }
median() { printf '%s\n' "$@" | awk 'NF && $1 != "nan"' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
fmt() { awk -v d="$1" -v x="$2" 'BEGIN { if (x == "" || x == "nan") print "n/a"; else printf "%.*f\n", d, x }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && a != "nan" && b != "nan" && b > 0) printf "%.3f", a / b; else printf "n/a" }'; }

lscpu_model="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
echo "== machine: ${lscpu_model:-unknown CPU}, $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- 1. exchange throughput ----
if [[ $skip_exchange == 0 ]]; then
  [[ -x "$xbench" ]] || { echo "gossip_bench.sh: $xbench not found (build it, or pass --build DIR)" >&2; exit 1; }
  echo "== $xbench $exchange_args"
  # shellcheck disable=SC2086
  timeout "$run_timeout" "$xbench" $exchange_args | tee "$results/exchange.txt" || echo "   (exchange bench failed or timed out)"
fi

# ---- Which PyTorch runs (the same choice as bench/train_bench.sh) ----
pt_note="" pt_blas="" ob_dir="" pt_env=(env)
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
if [[ $skip_ddp == 1 ]]; then
  pt_note="skipped (--skip-ddp)"
elif ! err="$("$python" -c 'import torch' 2>&1)"; then
  pt_note="skipped: '$python -c \"import torch\"' failed${err:+: $(printf '%s' "$err" | tail -n 1)} (Debian: apt-get install python3-torch)"
  echo "== ddp $pt_note"
else
  sys_blas="$(describe_blas "$(blas_of)")"
  echo "== ddp: the system gives torch $sys_blas"
  if [[ $openblas != off && $sys_blas != OpenBLAS* ]]; then
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
    [[ -n $ob_dir ]] || echo "   no OpenBLAS found: DDP runs with the system's BLAS (--fetch-openblas or --openblas DIR)"
  fi
  if [[ -n $ob_dir ]]; then
    pt_env=(env "LD_LIBRARY_PATH=$ob_dir")
    pt_blas="$(describe_blas "$(LD_LIBRARY_PATH="$ob_dir" blas_of)")"
  else
    pt_blas="$sys_blas"
  fi
fi

# ---- one swarm run: the quickstart configuration ----
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

run_swarm() {  # run_swarm OUT_DIR: N peers, waits for all (bounded), 0 if every peer succeeded
  local out="$1" seed="" k rc=0
  mkdir -p "$out"
  pids=()
  local common=(--epochs "$epochs" --min-peers "$peers" --eval-every "$eval_every" --threads 1)
  [[ -z $model ]] || common+=(--model "$model")
  [[ -z $lr ]] || common+=(--lr "$lr")
  # shellcheck disable=SC2206  # word splitting wanted: extra rumor-peer flags
  [[ -z $peer_args ]] || common+=($peer_args)
  # An exchange after every step, as this bench's figures were made (the default is auto since
  # 2026-12-06); --peer-args "--local-steps auto" measures the default.
  [[ $peer_args == *--local-steps* ]] || common+=(--local-steps 1)
  timeout "$run_timeout" "$peer" --listen 127.0.0.1:0 --shard "1/$peers" --name p1 --metrics "$out/p1.jsonl" \
    "${common[@]}" --data "$data" 2>"$out/p1.log" &
  pids+=($!)
  for _ in $(seq 1 600); do
    seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$out/p1.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
    [[ -n $seed ]] && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$out/p1.log" >&2; return 1; }
    sleep 0.1
  done
  [[ -n $seed ]] || { echo "   peer 1 did not start listening" >&2; cleanup; return 1; }
  for k in $(seq 2 "$peers"); do
    timeout "$run_timeout" "$peer" --listen 127.0.0.1:0 --join "$seed" --shard "$k/$peers" --name "p$k" \
      --metrics "$out/p$k.jsonl" "${common[@]}" --data "$data" 2>"$out/p$k.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  return $rc
}

# The metrics files of one swarm run -> per-peer lines and `key value` summary lines.
summarize_swarm() {  # summarize_swarm OUT_DIR
  /usr/bin/python3 - "$target" "$1"/p*.jsonl <<'EOF'
import json, statistics, sys
target = float(sys.argv[1])
rows = []
for path in sys.argv[2:]:
    evals, done = [], None
    with open(path) as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("event") == "eval":
                evals.append(d)
            elif d.get("event") == "done":
                done = d
    if not evals:
        continue
    t0 = evals[0]["t"]
    hit = next((i for i, e in enumerate(evals) if (e.get("test_acc") or 0) >= target), None)
    final = evals[-1]
    name = path.rsplit("/", 1)[-1].split(".")[0]
    r = {
        "peer": name,
        "time": evals[hit]["t"] - t0 if hit is not None else float("nan"),
        "step": evals[hit]["step"] if hit is not None else None,
        "after_settle": hit is not None and hit == len(evals) - 1,
        "mb_at": evals[hit]["bytes_sent"] / 1e6 if hit is not None else float("nan"),
        "final_acc": final.get("test_acc") or 0.0,
        "mb": (done or final)["bytes_sent"] / 1e6,
        "wall": done["wall_s"] if done else float("nan"),
        "exchanges": (done or final).get("exchanges", 0),
        "steps": done["steps"] if done else final["step"],
    }
    rows.append(r)
    note = " (only in the final eval, after the settle phase)" if r["after_settle"] else ""
    t = f"{r['time']:.2f} s at step {r['step']}{note}" if hit is not None else "not reached"
    print(f"   {name}: {target} {t}; final test_acc {r['final_acc']:.4f} after {r['steps']} steps, "
          f"{r['wall']:.1f} s; sent {r['mb']:.1f} MB ({r['mb_at']:.1f} MB by the target), "
          f"{r['exchanges']} exchanges")
def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")
reached = [r["time"] for r in rows if r["time"] == r["time"]]
print(f"rumor_peers {len(rows)}")
print(f"rumor_peers_reached {len(reached)}")
print(f"rumor_time_to_target_median_s {med([r['time'] for r in rows]):.3f}")
print(f"rumor_time_to_target_max_s {(max(reached) if len(reached) == len(rows) and rows else float('nan')):.3f}")
print(f"rumor_time_to_target_min_s {(min(reached) if reached else float('nan')):.3f}")
print(f"rumor_final_acc_median {med([r['final_acc'] for r in rows]):.4f}")
print(f"rumor_final_acc_min {min([r['final_acc'] for r in rows] or [float('nan')]):.4f}")
print(f"rumor_mb_sent_per_peer {med([r['mb'] for r in rows]):.1f}")
print(f"rumor_mb_at_target_per_peer {med([r['mb_at'] for r in rows]):.1f}")
print(f"rumor_wall_s {med([r['wall'] for r in rows]):.2f}")
print(f"rumor_exchanges_per_peer {med([r['exchanges'] for r in rows]):.0f}")
EOF
}

# ---- 2. rounds: the swarm, then DDP, one after the other ----
r_rt=() r_rtmax=() r_racc=() r_rmb=() r_rmbt=() r_rwall=() r_reached=()
r_dt=() r_dtt=() r_dacc=() r_dmb=() r_dmbe=() r_dwall=() r_ratio=() r_ratio_max=() r_ratio_train=()
for ((i = 1; i <= rounds; ++i)); do
  rf="" df=""
  if [[ $skip_rumor == 0 ]]; then
    [[ -x "$peer" ]] || { echo "gossip_bench.sh: $peer not found (build rumor-peer, or pass --build DIR)" >&2; exit 1; }
    echo "== round $i/$rounds: $peers rumor-peer processes, shards 1/$peers..$peers/$peers, $epochs epochs," \
      "--min-peers $peers --eval-every $eval_every (load $(cut -d' ' -f1 /proc/loadavg))"
    if run_swarm "$results/rumor.$i"; then :; else echo "   (a peer failed or timed out; see $results/rumor.$i/p*.log)"; fi
    rf="$results/rumor.$i.txt"
    summarize_swarm "$results/rumor.$i" | tee "$rf" | grep -v '^rumor_' || true
    r_rt+=("$(val rumor_time_to_target_median_s "$rf")")
    r_rtmax+=("$(val rumor_time_to_target_max_s "$rf")")
    r_racc+=("$(val rumor_final_acc_median "$rf")")
    r_rmb+=("$(val rumor_mb_sent_per_peer "$rf")")
    r_rmbt+=("$(val rumor_mb_at_target_per_peer "$rf")")
    r_rwall+=("$(val rumor_wall_s "$rf")")
    r_reached+=("$(val rumor_peers_reached "$rf")/$(val rumor_peers "$rf")")
  fi
  if [[ -z $pt_note ]]; then
    echo "== round $i/$rounds: ddp_fmnist.py --world $peers --epochs $epochs --eval-every $eval_every [$pt_blas]" \
      "(load $(cut -d' ' -f1 /proc/loadavg))"
    df="$results/ddp.$i.txt"
    "${pt_env[@]}" timeout "$run_timeout" "$python" "$here/ddp_fmnist.py" --world "$peers" --epochs "$epochs" \
      --eval-every "$eval_every" --target "$target" --data "$data" 2>&1 | tee "$df" || echo "   (ddp failed or timed out)"
    r_dt+=("$(val ddp_time_to_target_s "$df")")
    r_dtt+=("$(val ddp_time_to_target_train_s "$df")")
    r_dacc+=("$(val ddp_final_acc "$df")")
    r_dmb+=("$(val ddp_mb_sent_per_process "$df")")
    r_dmbe+=("$(val ddp_mb_allreduce_estimate "$df")")
    r_dwall+=("$(val ddp_wall_s "$df")")
  fi
  if [[ -n $rf && -n $df ]]; then
    r_ratio+=("$(ratio "${r_rt[-1]}" "${r_dt[-1]}")")
    r_ratio_max+=("$(ratio "${r_rtmax[-1]}" "${r_dt[-1]}")")
    r_ratio_train+=("$(ratio "${r_rt[-1]}" "${r_dtt[-1]}")")
  fi
done

# ---- table ----
row() { printf '%-34s %14s %10s %16s   %s\n' "$1" "$2" "$3" "$4" "${5:-}"; }
echo
echo "== results: $(date -u +%Y-%m-%d), ${lscpu_model:-unknown CPU} ($cores cores); $peers processes per system, one"
echo "   thread each, $epochs epochs, batch 64, Adam ${lr:-1e-3}, ${model:-mlp 784-256-128-10}; eval every $eval_every steps;"
echo "   medians over $rounds rounds (time to $target: wall seconds from the start of training)"
if [[ -f "$results/exchange.txt" ]]; then
  x="$results/exchange.txt"
  echo "   exchange throughput, $(val bytes_each_way "$x") bytes each way: rumor $(val rumor_gb_per_s "$x") GB/s," \
    "plain TCP $(val baseline_gb_per_s "$x") GB/s, ratio $(val ratio "$x") (target >= 0.85: $(awk '$1 == "target_ratio" { print $3 }' "$x"))"
fi
row "system" "time to $target (s)" "final acc" "MB sent per peer" "notes"
if [[ $skip_rumor == 0 ]]; then
  row "rumor (median peer)" "$(fmt 2 "$(median "${r_rt[@]}")")" "$(fmt 4 "$(median "${r_racc[@]}")")" \
    "$(fmt 1 "$(median "${r_rmb[@]}")")" "rounds: ${r_rt[*]}; peers reaching it: ${r_reached[*]}"
  row "rumor (slowest peer)" "$(fmt 2 "$(median "${r_rtmax[@]}")")" "" "" "rounds: ${r_rtmax[*]}"
  row "rumor, MB sent by the target" "" "" "$(fmt 1 "$(median "${r_rmbt[@]}")")" \
    "whole run ($epochs epochs + settle) $(fmt 1 "$(median "${r_rwall[@]}")") s"
fi
if [[ -n $pt_note ]]; then
  row "pytorch ddp (gloo)" "-" "-" "-" "$pt_note"
else
  row "pytorch ddp (gloo), with evals" "$(fmt 2 "$(median "${r_dt[@]}")")" "$(fmt 4 "$(median "${r_dacc[@]}")")" \
    "$(fmt 1 "$(median "${r_dmb[@]}")")" "[$pt_blas] rounds: ${r_dt[*]}"
  row "pytorch ddp, training only" "$(fmt 2 "$(median "${r_dtt[@]}")")" "" \
    "$(fmt 1 "$(median "${r_dmbe[@]}")")" "MB: socket writes (/proc/self/io) | ring all-reduce estimate; whole run $(fmt 1 "$(median "${r_dwall[@]}")") s"
fi
if [[ ${#r_ratio[@]} -gt 0 ]]; then
  row "rumor / ddp time (median peer)" "$(median "${r_ratio[@]}")" "" "" "target <= 0.5; rounds: ${r_ratio[*]}"
  row "rumor / ddp time (slowest peer)" "$(median "${r_ratio_max[@]}")" "" "" "rounds: ${r_ratio_max[*]}"
  row "rumor / ddp training-only time" "$(median "${r_ratio_train[@]}")" "" "" "rounds: ${r_ratio_train[*]}"
fi
echo "(raw outputs: $results)"
