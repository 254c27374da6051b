#!/usr/bin/env bash
# Sets up a fresh Debian machine (as root: apt-get installs what is missing), builds Rumor and
# runs the whole test suite through ctest. Usage: tests/run.sh [BUILD_DIR]   (default: build)
# Environment: RUMOR_TEST_JOBS (ctest parallelism, default 2), RUMOR_CMAKE_ARGS (extra flags).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
# shellcheck source=../examples/setup.sh
source "$here/examples/setup.sh"
rumor_install_packages
rumor_build "$build" ${RUMOR_CMAKE_ARGS:-}

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
