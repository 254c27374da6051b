#!/usr/bin/env bash
# Are the CPU numbers bit for bit those of an earlier commit? Builds rumor_core of BASE (default
# 169d4b6, the last commit before the backend interface) and of this tree, links
# bench/cpu_identity.cpp against each, and compares the bytes they write (model gradients,
# optimizer steps, Trainer runs). Exit 0 and "IDENTICAL" if they match.
# Usage: bench/cpu_identity.sh [BASE]      (about 5 minutes on 2 cores: two core builds)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${1:-169d4b6}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git -C "$here" archive "$base" | tar -x -C "$work" --one-top-level=base
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
for side in base new; do
  src="$work/base"
  [ "$side" = new ] && src="$here"
  cmake -S "$src" -B "$work/build-$side" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DRUMOR_CUDA=OFF -DRUMOR_TESTS=OFF \
    -DRUMOR_BENCH=OFF >/dev/null
  # The data sets: rumor_files in peer/ at the base, rumor_data (data/, below rumor_core) here.
  target=rumor_core libs=("$work/build-$side/core/librumor_core.a" "$work/build-$side/data/librumor_data.a")
  [ "$side" = base ] && target=rumor_files libs=("$work/build-$side/peer/librumor_files.a" "$work/build-$side/core/librumor_core.a")
  cmake --build "$work/build-$side" -j "$(nproc)" --target "$target" >/dev/null
  c++ -std=c++20 -O3 -march=native -DEIGEN_NO_DEBUG -I"$src" -I/usr/include/eigen3 "$here/bench/cpu_identity.cpp" \
    "${libs[@]}" -lz -fopenmp -o "$work/dump-$side"
  "$work/dump-$side" "$work/out-$side.bin"
done
if cmp "$work/out-base.bin" "$work/out-new.bin"; then
  echo "IDENTICAL: $(stat -c %s "$work/out-new.bin") bytes of gradients, optimizer steps and Trainer runs match $base"
else
  echo "DIFFERENT from $base" >&2
  exit 1
fi
