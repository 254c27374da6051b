#!/usr/bin/python3
"""Bytes a finished peer sends while it settles, against its bytes while training (issue 32).

Runs examples/torch_quickstart.py --mixed M (Python peers and rumor-peer processes in one swarm)
ROUNDS times. The quickstart's --mixed default is a swarm-wide budget (--swarm-epochs = --epochs):
the rumor-peer processes train until the swarm is done, and every peer settles at the end. With
--swarm-epochs 0 each peer does --epochs of its own shard: the rumor-peer processes finish long
before the Python peers and settle while they wait for them (--settle-max). The rumor-peer
processes' "settled" metrics line gives the bytes they sent
before settling (training) and while settling. Prints one row per round and peer, then the
medians: settling bytes / training bytes (target: at most 0.10) and every peer's final test
accuracy (the swarm should end on one model).

  bench/settle_bytes.py --rounds 3 [--build build] [--epochs 1] [--swarm-epochs E] [--mixed 2]
                       [--out out/settle_bytes]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def one_round(a, k):
    out = os.path.join(a.out, f"round{k}")
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    cmd = [sys.executable, os.path.join(ROOT, "examples", "torch_quickstart.py"), "--mixed", str(a.mixed),
           "--epochs", str(a.epochs), "--out", out, "--local-steps", "1",  # as its figures were made (default: auto)
           *(["--swarm-epochs", str(a.swarm_epochs)] if a.swarm_epochs is not None else []), "--build", a.build, "--timeout", str(a.timeout)]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.exit(r.stdout[-3000:] + f"\nround {k} failed: {' '.join(cmd)}")
    rows = []
    for f in sorted(os.listdir(out)):
        if not f.endswith(".jsonl"):
            continue
        ev = [json.loads(line) for line in open(os.path.join(out, f))]
        settled = [e for e in ev if e["event"] == "settled" and not e.get("pause")]
        done = [e for e in ev if e["event"] == "done"]
        acc = done[-1]["test_acc"] if done else [e for e in ev if e["event"] == "eval"][-1]["test_acc"]
        row = {"round": k, "peer": f[:-6], "acc": acc}
        if settled and "bytes_sent_before" in settled[-1]:
            s = settled[-1]
            row.update(train_mb=s["bytes_sent_before"] / 1e6, settle_mb=s["bytes_sent"] / 1e6,
                       settle_s=s["seconds"], settle_exchanges=s["exchanges"])
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mixed", type=int, default=2, help="rumor-peer processes among the 4 peers")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--swarm-epochs", type=float, default=None,
                    help="torch_quickstart.py --swarm-epochs (its default with --mixed: --epochs, a swarm-wide "
                         "budget, so the rumor-peer processes train until the swarm is done; 0: each peer does "
                         "--epochs of its own and the rumor-peer processes settle while the Python peers finish)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "settle_bytes"))
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    rows = []
    print(f"{'round':>5} {'peer':>4} {'train MB':>9} {'settle MB':>9} {'ratio':>7} {'settle s':>8} "
          f"{'exchanges':>9} {'test_acc':>8}", flush=True)
    for k in range(1, a.rounds + 1):
        for r in one_round(a, k):
            rows.append(r)
            if "train_mb" in r:
                print(f"{k:>5} {r['peer']:>4} {r['train_mb']:>9.1f} {r['settle_mb']:>9.1f} "
                      f"{r['settle_mb'] / max(r['train_mb'], 1e-9):>7.3f} {r['settle_s']:>8.1f} "
                      f"{r['settle_exchanges']:>9} {r['acc']:>8.4f}", flush=True)
            else:
                print(f"{k:>5} {r['peer']:>4} {'':>9} {'':>9} {'':>7} {'':>8} {'':>9} {r['acc']:>8.4f}", flush=True)
    native = [r for r in rows if r["peer"].startswith("c") and "train_mb" in r]
    ratios = [r["settle_mb"] / r["train_mb"] for r in native if r["train_mb"] > 0]
    spreads = []
    for k in range(1, a.rounds + 1):
        accs = [r["acc"] for r in rows if r["round"] == k]
        spreads.append(max(accs) - min(accs))
    print(f"rumor-peer settling / training bytes: median {statistics.median(ratios):.3f}, "
          f"max {max(ratios):.3f} over {len(ratios)} (<= 0.10: {'met' if statistics.median(ratios) <= 0.10 else 'not met'})")
    print(f"final test accuracy: median {statistics.median(r['acc'] for r in rows):.4f}, "
          f"largest spread between peers in a round {max(spreads):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
