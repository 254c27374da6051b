#!/usr/bin/env bash
# The chaos soak (docs/testing.md, "The chaos soak"): a fault-free run of 8 rumor-peer and 2 Python
# peers for DURATION seconds (default 600) gives the reference accuracy, then the same swarm for
# the same time under faults drawn from SEED (bench/chaos.py: SIGKILL and restart from
# checkpoints, SIGSTOP/SIGCONT, joiners, graceful leavers). Passes when no process ran past its
# bound, every checkpoint verifies, no evaluation was non-finite, at least 100 faults were
# injected (over 600 s; scaled for shorter runs) and the survivors end within 1 point of the
# reference.
# Usage: bench/chaos.sh [BUILD_DIR] [DURATION] [SEED]     Output: out/chaos-{reference,soak}/
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}" duration="${2:-600}" seed="${3:-1}"
min_faults=$(( 100 * ${duration%.*} / 600 ))
echo "== fault-free reference: 8 rumor-peer + 2 Python peers, ${duration} s"
/usr/bin/python3 "$here/bench/chaos.py" --build "$build" --duration "$duration" --fault-free \
  --out "$here/out/chaos-reference" | tee "$here/out/chaos-reference.txt"
ref=$(grep -oE "median [0-9.]+" "$here/out/chaos-reference.txt" | tail -n 1 | awk '{print $2}')
[ -n "$ref" ] || { echo "the reference run reported no accuracy" >&2; exit 1; }
echo "== the soak: the same swarm under faults (seed $seed), reference accuracy $ref"
exec /usr/bin/python3 "$here/bench/chaos.py" --build "$build" --duration "$duration" --seed "$seed" \
  --reference "$ref" --max-drop 0.01 --min-faults "$min_faults" --out "$here/out/chaos-soak"
