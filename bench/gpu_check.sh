#!/usr/bin/env bash
# The one script to run on a machine with an NVIDIA GPU (issue 8). It builds Rumor with the
# CUDA backend (RUMOR_CUDA=ON), runs the GPU tests (CUDA vs Eigen backend, the mixed GPU+CPU
# swarm tests, the --device errors), the GPU benchmark (bench_gpu: samples/s of mlp:256,128 at
# batch 64 and 1024 on the GPU vs the CPU backend vs the cuBLAS-bound ceiling) and a mixed
# 2-peer run (examples/mixed.sh), and writes everything under one directory:
#   OUT_DIR/gpu_check.log   everything below, in order
#   OUT_DIR/nvidia-smi.txt, build.log, test_gpu.txt, test_backend.txt, test_peer_gpu.txt,
#   OUT_DIR/bench_gpu_t1.txt (CPU side on 1 thread, as rumor-peer defaults), bench_gpu_tN.txt
#   (CPU side on every core), mixed/ (logs and metrics of the 2-peer run), summary.txt
# Budget: about 8 minutes on 16 cores (build ~2-3 min, tests ~1.5 min, benchmark ~2 min,
# mixed run ~1 min); every stage has its own timeout, and a failing stage does not stop the
# later ones (the exit code says whether any failed).
#
# Usage: bench/gpu_check.sh [OUT_DIR]      (default: $OUT, else out/gpu-check)
# Environment: BUILD (build-gpu), CUDA_ARCH (90: the H200; the default build also has 80),
#   SKIP_BUILD (1: use BUILD as it is).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-${OUT:-$here/out/gpu-check}}")"
build="$(realpath -m "${BUILD:-$here/build-gpu}")"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
failed=()
stage() {  # stage NAME TIMEOUT_S OUTFILE CMD...
  local name="$1" limit="$2" file="$3"
  shift 3
  echo "== $name (timeout ${limit}s) -> $file"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$file" 2>&1
  local rc=$?
  tail -n 25 "$out/$file"
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed+=("$name (rc $rc)")
}

echo "== rumor gpu check, $(date -u +%FT%TZ), $(nproc) cores, commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (see nvidia-smi.txt)"
head -n 15 "$out/nvidia-smi.txt"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  source "$here/examples/setup.sh"
  rumor_install_packages || echo "warning: could not install missing packages; building with what is here"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  stage build 420 build.log bash -c "cmake -S '$here' -B '$build' ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DRUMOR_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES='${CUDA_ARCH:-90}' -DRUMOR_PCH=ON && \
    cmake --build '$build' -j '$(nproc)' --target test_gpu test_core test_peer rumor-peer rumor-evil-peer bench_gpu"
fi

stage "test_gpu (CUDA vs Eigen backend)" 180 test_gpu.txt "$build/tests/test_gpu" --duration=true
grep -q "SKIPPED: no CUDA device" "$out/test_gpu.txt" && failed+=("test_gpu skipped: no device seen")
stage "test_core backend tests" 60 test_backend.txt "$build/tests/test_core" -tc='backend*'
stage "test_peer: mixed GPU+CPU swarms, --device errors" 300 test_peer_gpu.txt \
  "$build/tests/test_peer" -tc='gpu swarm*,cli: --device*' --duration=true
stage "bench_gpu (cpu side: 1 thread)" 200 bench_gpu_t1.txt "$build/bench/bench_gpu" --cpu-threads 1
stage "bench_gpu (cpu side: $(nproc) threads)" 120 bench_gpu_tN.txt "$build/bench/bench_gpu" --cpu-threads "$(nproc)" \
  --reps 3
stage "mixed 2-peer run (examples/mixed.sh, 2 epochs)" 180 mixed.txt \
  env NO_SETUP=1 BUILD="$build" EPOCHS=2 "$here/examples/mixed.sh" "$out/mixed"

{
  echo "# rumor gpu check summary ($(date -u +%FT%TZ))"
  grep -h "^gpu_device\|^cpu_threads\|_samples_per_s\|_over_\|_us " "$out"/bench_gpu_t1.txt "$out"/bench_gpu_tN.txt 2>/dev/null
  grep -h "test cases:\|assertions:" "$out"/test_gpu.txt "$out"/test_backend.txt "$out"/test_peer_gpu.txt 2>/dev/null
  grep -h "done:" "$out"/mixed/*.log 2>/dev/null
  grep -h "SKIPPED\|no CUDA device" "$out"/*.txt "$out"/mixed/*.log 2>/dev/null | sort | uniq -c
  if [ ${#failed[@]} -eq 0 ]; then echo "all stages passed"; else printf 'FAILED: %s\n' "${failed[@]}"; fi
} > "$out/summary.txt"
echo "== summary ($out/summary.txt)"
cat "$out/summary.txt"
[ ${#failed[@]} -eq 0 ]
