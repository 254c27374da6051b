#!/usr/bin/env bash
# Partial views on real processes (issue 30; docs/sim.md "Partial views"): 64 rumor-peer
# processes on loopback (synthetic data, logreg, one thread each, active views of 6, passive
# of 36) join through one member and train; 3 are SIGKILLed and repaired around; a late joiner
# gets the model; the survivors leave with SIGTERM. Checks every evaluation's view sizes
# (`view_active`, `view_passive`, `peers` in the metrics) and prints the figures. It is the
# doctest case "partial views: 64 peers ..." of test_peer (also a ctest case; about 30 s).
#
#   bench/partial_views_64.sh [--build DIR] [--no-build]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build="$repo/build"
do_build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "partial_views_64.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if [[ $do_build == 1 ]]; then
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j2 --target test_peer rumor-peer
fi
"$build/tests/test_peer" -tc='partial views: 64 peers*' 2>&1 | grep -v '^\[doctest\] \(doctest version\|run with\)'
