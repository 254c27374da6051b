#!/usr/bin/env bash
# A mixed swarm: one GPU peer (--device cuda) and one CPU peer on loopback, training
# Fashion-MNIST (shards 1/2 and 2/2). They speak the same wire format and average the same
# flat float32 parameters; the GPU peer's parameters reach the protocol through a pinned host
# mirror (docs/ARCHITECTURE.md, "Backends"). Prints each peer's final accuracy and samples/s,
# and a table and PNG through examples/report.py.
#
# Usage: examples/mixed.sh [OUT_DIR]          (default: out/mixed)
# Environment: EPOCHS (2), GPU_DEVICE (cuda), CPU_THREADS (1), BUILD (build; configured with
#   the CUDA backend where nvcc exists), EXTRA ("": more rumor-peer flags for both),
#   NO_SETUP (1: skip package installation and the build, use BUILD as it is).
# Needs a GPU: without one the GPU peer exits 1 with "no CUDA device found" (GPU_DEVICE=emulated
# runs the same flow with the CPU standing in for the GPU).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/examples/setup.sh"
out="${1:-$here/out/mixed}"
epochs="${EPOCHS:-2}"
build="${BUILD:-$here/build}"
if [ "${NO_SETUP:-0}" != 1 ]; then
  rumor_install_packages
  rumor_build "$build"
fi
bin="$build/peer/rumor-peer"
rm -rf "$out"
mkdir -p "$out"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

echo "== gpu peer (--device ${GPU_DEVICE:-cuda}) and cpu peer (--threads ${CPU_THREADS:-1}), $epochs epochs; logs in $out"
"$bin" --listen 127.0.0.1:0 --shard 1/2 --epochs "$epochs" --name gpu --min-peers 2 --device "${GPU_DEVICE:-cuda}" \
  --metrics "$out/gpu.jsonl" ${EXTRA:-} 2>"$out/gpu.log" &
pids+=($!)
seed=""
for _ in $(seq 1 600); do
  seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$out/gpu.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
  [ -n "$seed" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$out/gpu.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$seed" ] || { echo "the gpu peer did not start listening" >&2; exit 1; }
"$bin" --listen 127.0.0.1:0 --join "$seed" --shard 2/2 --epochs "$epochs" --name cpu --min-peers 2 --device cpu \
  --threads "${CPU_THREADS:-1}" --metrics "$out/cpu.jsonl" ${EXTRA:-} 2>"$out/cpu.log" &
pids+=($!)
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
pids=()
grep -h "device\|done:" "$out/gpu.log" "$out/cpu.log" || true
[ $rc -eq 0 ] || { echo "a peer failed; see $out/*.log" >&2; exit 1; }
/usr/bin/python3 "$here/examples/report.py" --png "$out/accuracy.png" "$out"/gpu.jsonl "$out"/cpu.jsonl || true
