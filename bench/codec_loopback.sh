#!/usr/bin/env bash
# 4 rumor-peer on loopback with the quickstart flags (examples/sim/quickstart.ini), 1 epoch, the
# given extra flags; prints each peer's final accuracy, bytes and exchanges (bench/HISTORY.md
# "Fragments and the int4 codec"). Usage: bench/codec_loopback.sh OUT_DIR [FLAGS...]
# e.g. bench/codec_loopback.sh out/int4f4 --codec int4 --fragments 4
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$1"; shift
extra="$*"
bin=build/peer/rumor-peer
rm -rf "$out"; mkdir -p "$out"
mapfile -t flags < <(build/sim/rumor-sim examples/sim/quickstart.ini --peer-flags all --set workload.epochs=1)
pids=()
$bin --listen 127.0.0.1:0 ${flags[0]} --name p1 --metrics "$out/p1.jsonl" $extra 2>"$out/p1.log" &
pids+=($!)
seed=""
for _ in $(seq 1 600); do
  seed=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$out/p1.log" 2>/dev/null | head -n 1 | awk '{print $3}' || true)
  [ -n "$seed" ] && break; sleep 0.1
done
for k in 2 3 4; do
  $bin --listen 127.0.0.1:0 --join "$seed" ${flags[$((k-1))]} --name "p$k" --metrics "$out/p$k.jsonl" $extra 2>"$out/p$k.log" &
  pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo "rc=$rc"
/usr/bin/python3 - "$out" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/p*.jsonl")):
    ev = [json.loads(l) for l in open(f)]
    ev = [r for r in ev if r.get("event") == "eval"]
    if not ev:
        print(f, "no eval line"); continue
    d = ev[-1]
    per = d["payload_bytes_sent"] / d["payloads_sent"] if d.get("payloads_sent") else 0
    print(f"{f.split('/')[-1]}: test_acc {d['test_acc']}, {d['bytes_sent']} bytes sent, {d['exchanges']} exchanges, "
          f"{per:.0f} payload bytes per exchange, int4_absolute {d.get('int4_absolute', 0)}")
PY
