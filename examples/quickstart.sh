#!/usr/bin/env bash
# Rumor's main job: set up (Debian packages, build), start 4 peers on loopback training
# Fashion-MNIST (shards 1/4..4/4) for 3 epochs, then print a table of the peers and write a PNG
# of every peer's test accuracy against time.
#
# The run is described once, in examples/sim/quickstart.ini: the peers' flags come from it
# (`rumor-sim ... --peer-flags all`), and rumor-sim simulates the same file
# (bench/sim_calibration.sh compares the two).
#
# Usage: examples/quickstart.sh [OUT_DIR]        (default: out/quickstart)
# Environment: PEERS (4), EPOCHS (3), BUILD (build), EXTRA ("" : more rumor-peer flags)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/examples/setup.sh"
out="${1:-$here/out/quickstart}"
peers="${PEERS:-4}"
epochs="${EPOCHS:-3}"
build="${BUILD:-$here/build}"
scenario="$here/examples/sim/quickstart.ini"

rumor_install_packages
rumor_build "$build"
bin="$build/peer/rumor-peer"
rm -rf "$out"
mkdir -p "$out"
# One line of flags per peer (p1 first): shard, data, model, optimizer, epochs, --min-peers ...
mapfile -t flags < <("$build/sim/rumor-sim" "$scenario" --peer-flags all --set "workload.epochs=$epochs" \
  --set "class.joiners.count=$((peers - 1))" --set "run.min_peers=$peers")
[ "${#flags[@]}" -eq "$peers" ] || { echo "rumor-sim --peer-flags gave ${#flags[@]} peers, expected $peers" >&2; exit 1; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

echo "== starting $peers peers on 127.0.0.1 (logs and metrics in $out)"
# Peer 1 starts the swarm on a free port; the others join through it.
# shellcheck disable=SC2086  # each line is a list of flags (rumor-sim refuses values with spaces)
"$bin" --listen 127.0.0.1:0 ${flags[0]} --name p1 --metrics "$out/p1.jsonl" ${EXTRA:-} 2>"$out/p1.log" &
pids+=($!)
seed=""
for _ in $(seq 1 600); do
  seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$out/p1.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
  [ -n "$seed" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$out/p1.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$seed" ] || { echo "peer 1 did not start listening" >&2; exit 1; }
echo "   p1 listens on $seed"
for k in $(seq 2 "$peers"); do
  # shellcheck disable=SC2086
  "$bin" --listen 127.0.0.1:0 --join "$seed" ${flags[$((k - 1))]} --name "p$k" --metrics "$out/p$k.jsonl" \
    ${EXTRA:-} 2>"$out/p$k.log" &
  pids+=($!)
done
tail -q -n 0 -f "$out/p1.log" | grep --line-buffered -E "test_acc|view:" &
tailer=$!
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
kill "$tailer" 2>/dev/null || true
pids=()
[ $rc -eq 0 ] || { echo "a peer failed; see $out/p*.log" >&2; exit 1; }

/usr/bin/python3 "$here/examples/report.py" --png "$out/accuracy.png" "$out"/p*.jsonl
