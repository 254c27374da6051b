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

echo "== ctest"
cd "$build"
ctest --output-on-failure -j "${RUMOR_TEST_JOBS:-2}" --timeout 600
