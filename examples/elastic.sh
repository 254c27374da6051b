#!/usr/bin/env bash
# Elastic training on loopback: 4 peers train Fashion-MNIST; at stated times one is SIGKILLed,
# one SIGTERMed (graceful leave: its model is handed to a neighbour), two new peers join (they
# fetch the swarm's model first), and the killed one is resumed from its checkpoint. Writes a
# PNG of every peer's test accuracy against time with the events marked, and a table.
#
# Usage: examples/elastic.sh [OUT_DIR]   (default out/elastic; env BUILD, DURATION=40)
# Schedule (seconds after the start): 10 kill p2 | 14 SIGTERM p3 | 18 join p5 | 20 join p6 |
#                                     24 resume p2 from its checkpoint | DURATION end
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$here/examples/setup.sh"
out="${1:-$here/out/elastic}"
build="${BUILD:-$here/build}"
duration="${DURATION:-40}"
rumor_install_packages
rumor_build "$build"
bin="$build/peer/rumor-peer"
rm -rf "$out"
mkdir -p "$out"
common=(--eval-every 100 --probe-interval 0.3 --suspect-timeout 2 --settle 0)
declare -A pid
cleanup() { for p in "${pid[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
t0=$(date +%s.%N)
echo "t0 $t0" > "$out/events.txt"
now() { awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }'; }
at() { while awk -v n="$(now)" -v t="$1" 'BEGIN { exit !(n < t) }'; do sleep 0.1; done; }
log_event() { echo "$(now) $1 $2" >> "$out/events.txt"; echo "== t=$(printf %.1f "$(now)") $1 $2"; }

start() {  # start NAME SHARD DURATION [extra flags]
  local name=$1 shard=$2 dur=$3
  shift 3
  "$bin" --listen 127.0.0.1:0 --shard "$shard" --duration "$dur" --name "$name" --metrics "$out/$name.jsonl" \
    "${common[@]}" "$@" 2>>"$out/$name.log" &
  pid[$name]=$!
}
seed_of() { grep -oE 'listening on [0-9.]+:[0-9]+' "$out/$1.log" | head -n 1 | awk '{print $3}'; }

start p1 1/6 "$duration" --min-peers 4
for _ in $(seq 1 300); do [ -n "$(seed_of p1 2>/dev/null)" ] && break; sleep 0.1; done
seed=$(seed_of p1)
start p2 2/6 "$duration" --join "$seed" --min-peers 4 --checkpoint "$out/ckpt-p2" --checkpoint-every 2
start p3 3/6 "$duration" --join "$seed" --min-peers 4
start p4 4/6 "$duration" --join "$seed" --min-peers 4
log_event start "p1-p4"

at 10; kill -KILL "${pid[p2]}"; log_event kill p2
at 14; kill -TERM "${pid[p3]}"; log_event sigterm p3
at 18; start p5 5/6 $((duration - 18)) --join "$seed"; log_event join p5
at 20; start p6 6/6 $((duration - 20)) --join "$(seed_of p4)"; log_event join p6
at 24; start p2 2/6 $((duration - 24)) --join "$seed" --checkpoint "$out/ckpt-p2" --resume; log_event resume p2
for name in "${!pid[@]}"; do wait "${pid[$name]}" 2>/dev/null || true; done
pid=()
/usr/bin/python3 "$here/examples/elastic_plot.py" "$out"
# The same schedule in the simulator, and both side by side.
if [ -x "$build/sim/rumor-sim" ]; then
  "$build/sim/rumor-sim" "$here/examples/sim/elastic.ini" --out "$out/sim" >/dev/null
  /usr/bin/python3 "$here/examples/elastic_compare.py" "$out" "$out/sim" "$out/real_vs_sim.png"
fi
