#!/usr/bin/env python3
"""Summarise rumor-peer metrics files (JSON lines, docs/metrics.md): a table of the peers and a
PNG of every peer's test accuracy against time.

usage: report.py [--png FILE] [--title T] [--events] METRICS.jsonl...
"""
import argparse
import json
import os
import sys


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--png", help="write the accuracy plot here")
    ap.add_argument("--title", default="Rumor: test accuracy of every peer")
    ap.add_argument("--events", action="store_true", help="mark join/leave/dead events on the plot")
    args = ap.parse_args()

    peers = []
    for path in args.files:
        rows = load(path)
        name = os.path.splitext(os.path.basename(path))[0]
        evals = [r for r in rows if r.get("event") == "eval"]
        done = next((r for r in rows if r.get("event") == "done"), None)
        peers.append((name, rows, evals, done))

    print(f"{'peer':<8}{'test_acc':>10}{'steps':>8}{'MB sent':>10}{'MB recv':>10}{'exchanges':>11}{'declined':>10}{'failed':>8}{'samples/s':>11}{'wall s':>8}")
    for name, rows, evals, done in peers:
        last = done or (evals[-1] if evals else {})
        ex = (evals[-1].get("exchanges") if evals else 0) or 0
        failed = sum(1 for r in rows if r.get("event") == "exchange_failed")
        declined = sum(1 for r in rows if r.get("event") == "exchange_declined")  # normal: crossing requests
        print(f"{name:<8}{last.get('test_acc', float('nan')):>10.4f}{last.get('steps', last.get('step', 0)):>8}"
              f"{last.get('bytes_sent', 0) / 1e6:>10.1f}{last.get('bytes_recv', 0) / 1e6:>10.1f}{ex:>11}{declined:>10}{failed:>8}"
              f"{last.get('samples_per_s', 0):>11.0f}{last.get('wall_s', last.get('t', 0)):>8.1f}")
        if not done:
            print(f"  ({name} has no 'done' line: it did not finish)")
    finals = [done["test_acc"] for _, _, _, done in peers if done and done.get("test_acc") is not None]
    if len(finals) > 1:  # a swarm that settled ends on one model: the spread says how close
        print(f"final test_acc of the {len(finals)} peers that finished: {min(finals):.4f}-{max(finals):.4f}, "
              f"spread {100 * (max(finals) - min(finals)):.2f} points")

    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, rows, evals, done in peers:
            ax.plot([r["t"] for r in evals], [r["test_acc"] for r in evals], marker="o", ms=3, label=name)
            if args.events:
                for r in rows:
                    if r.get("event") in ("join", "leave", "dead", "joined"):
                        ax.axvline(r["t"], color="grey", lw=0.5, alpha=0.4)
        ax.set_xlabel("seconds since the peer started")
        ax.set_ylabel("test accuracy")
        ax.set_title(args.title)
        accs = [r["test_acc"] for _, _, ev, _ in peers for r in ev if r["test_acc"] is not None]
        if accs and max(accs) > 0.5:
            ax.set_ylim(max(0.0, min(a for a in accs if a > 0.3) - 0.05), min(1.0, max(accs) + 0.02))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
