#!/usr/bin/env bash
# Sets up a fresh Debian machine (as root: apt-get installs what is missing), builds Rumor and
# runs the whole test suite through ctest; then the unit and loopback tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer (in BUILD_DIR-asan), and each libFuzzer target
# for a few seconds (in BUILD_DIR-fuzz, when clang with libFuzzer is installed). docs/security.md.
# Usage: tests/run.sh [BUILD_DIR]   (default: build)
# Environment: RUMOR_TEST_JOBS (ctest parallelism, default 2), RUMOR_CMAKE_ARGS (extra flags),
#   RUMOR_SANITIZE_STAGE (1 by default: unit and net tests; full: also the trust swarms of
#   test_peer; 0 skips the sanitizer stage),
#   RUMOR_FUZZ_SECONDS (seconds per fuzz target, default 5; 0 skips fuzzing).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${1:-$here/build}")"  # absolute: the stages below run from elsewhere
# shellcheck source=../examples/setup.sh
source "$here/examples/setup.sh"
rumor_install_packages
rumor_build "$build" ${RUMOR_CMAKE_ARGS:-}

# RUMOR_CUDA=AUTO (the default) builds the CUDA backend, test_gpu and bench_gpu wherever nvcc
# exists, so they always compile and link; without a GPU their tests report themselves skipped.
if [ -f "$build/gpu/librumor_gpu.so" ]; then
  echo "== CUDA backend built (gpu/); GPU tests run where a device is, and are skipped elsewhere"
else
  echo "== CUDA backend not built (no nvcc found, or RUMOR_CUDA=OFF)"
fi

echo "== core purity check"
bash "$here/.ci/check-core-purity"
# ctest splits test names at ';' (a CMake list), so such a test would silently run nothing.
if grep -rn 'TEST_CASE("[^"]*;' "$here/tests"; then
  echo "test names above contain ';': ctest would run none of them; use ',' instead" >&2
  exit 1
fi

echo "== ctest"
cd "$build"
ctest --output-on-failure -j "${RUMOR_TEST_JOBS:-2}" --timeout 600

# ---- sanitizers: the unit and loopback tests built with ASan + UBSan (any finding fails), at
# -O1 (the level ASan documents as its usual one: quicker to compile than -O2 on 2 cores).
# RUMOR_SANITIZE_STAGE=1 (default): test_core and test_net (unit tests, the transport on
# loopback with the swarm key and TLS, the fuzz corpus and regressions); =full: also the trust,
# TLS and robust-mixing swarms of test_peer (builds the daemon too); =0: skipped.
sanitize="${RUMOR_SANITIZE_STAGE:-1}"
if [ "$sanitize" != 0 ]; then
  asan="$build-asan"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  echo "== sanitizers: building the tests with ASan + UBSan in $asan"
  if [ ! -f "$asan/CMakeCache.txt" ]; then
    cmake -S "$here" -B "$asan" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
      -DRUMOR_SANITIZE=ON -DRUMOR_BENCH=OFF -DRUMOR_CUDA=OFF >/dev/null
  fi
  asan_targets=(test_core test_net)
  [ "$sanitize" = full ] && asan_targets+=(test_peer rumor-peer rumor-evil-peer)
  cmake --build "$asan" -j "$(nproc)" --target "${asan_targets[@]}"
  echo "== sanitizers: ctest (${asan_targets[*]})"
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd "$asan" && ctest --output-on-failure -j "${RUMOR_TEST_JOBS:-2}" --timeout 600 -L '^test_(core|net)$')
  if [ "$sanitize" = full ]; then
    # The peer tests that measure accuracy or timing are too slow under ASan to mean anything.
    (cd "$asan" && ctest --output-on-failure --timeout 600 -L '^test_peer$' -R '^(trust|tls|robust|two worlds: pure|swarm: a peer killed)')
  fi
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

# ---- fuzzing: each libFuzzer target for a few seconds from the committed seeds.
fuzz_seconds="${RUMOR_FUZZ_SECONDS:-5}"
if [ "$fuzz_seconds" != 0 ]; then
  probe="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
  if command -v clang++ >/dev/null && clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
    fz="$build-fuzz"
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    echo "== fuzzing: building the targets with clang in $fz"
    if [ ! -f "$fz/CMakeCache.txt" ]; then
      cmake -S "$here" -B "$fz" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DRUMOR_FUZZ=ON \
        -DRUMOR_TESTS=OFF -DRUMOR_BENCH=OFF -DRUMOR_CUDA=OFF >/dev/null
    fi
    targets=(frame handshake messages codecs gossip)
    cmake --build "$fz" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
    mkdir -p "$fz/findings"
    for t in "${targets[@]}"; do
      # New inputs go to a scratch corpus, never into the committed one.
      work="$fz/work/$t"
      mkdir -p "$work"
      seeds=("$here/fuzz/corpus/$t")
      [ -d "$here/fuzz/regressions/$t" ] && seeds+=("$here/fuzz/regressions/$t")
      if ! "$fz/fuzz/fuzz_$t" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
          -artifact_prefix="$fz/findings/$t-" "$work" "${seeds[@]}" > "$fz/fuzz_$t.log" 2>&1; then
        tail -n 40 "$fz/fuzz_$t.log"
        echo "fuzz_$t found a problem; its input is in $fz/findings/ (fix it, then add the input to fuzz/regressions/$t/)" >&2
        exit 1
      fi
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$fz/fuzz_$t.log")
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$fz/fuzz_$t.log")
      echo "fuzz_$t: ${runs:-?} executions in ${fuzz_seconds} s (${rate:-?}/s), no crash"
    done
  else
    echo "== fuzzing skipped: clang++ with libFuzzer not found (apt-get install clang libclang-rt-dev)"
  fi
  rm -rf "$probe"
fi
