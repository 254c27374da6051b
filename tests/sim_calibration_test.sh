#!/usr/bin/env bash
# ctest: bench/sim_calibration.sh on a 1-epoch quickstart, with --check 0.3: the wall times
# from launch within 30%, accuracy within docs/sim.md's targets x 1.3 (the training wall times
# alone are reported, not checked: the simulator overestimates them today). Exit 77 (skipped)
# without Fashion-MNIST. Usage: sim_calibration_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
if [[ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]]; then
  echo "SKIPPED: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
out="$build/sim-calibration-test"
rm -rf "$out"
exec bash "$src/bench/sim_calibration.sh" --build "$build" --no-build --epochs 1 --check 0.3 --out "$out"
