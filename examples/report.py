#!/usr/bin/env python3
"""Summarise rumor-peer metrics files (JSON lines, docs/metrics.md): a table of the peers and a
PNG of every peer's test accuracy against time: one time axis for all of them (seconds since the
first peer began training, from each file's wall-clock `start` line), and a y axis that shows
each whole curve (from 0).

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
        curves, t0 = accuracy_curves([(name, rows) for name, rows, _, _ in peers])
        for name, xs, ys, events in curves:
            ax.plot(xs, ys, marker="o", ms=3, label=name)
            if args.events:
                for x in events:
                    ax.axvline(x, color="grey", lw=0.5, alpha=0.4)
        ax.set_xlabel("seconds since the first peer began training" if t0 is not None
                      else "seconds since each peer started (no start lines: not one axis)")
        ax.set_ylabel("test accuracy")
        ax.set_title(args.title)
        ax.set_ylim(*accuracy_ylim(curves))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


def wall_times(rows):
    """Wall-clock seconds of every row, through the start line before it (a resumed peer's file
    has one per life); None for rows before any start line."""
    base, out = None, []
    for r in rows:
        if r.get("event") == "start" and "unix_time" in r:
            base = r["unix_time"] - r.get("t_offset", r["t"])
        out.append(None if base is None else base + r["t"])
    return out


def accuracy_curves(peers):
    """peers: [(name, rows)]. Returns ([(name, xs, ys, event_xs)], t0): each peer's evaluations on
    one axis, seconds since the first evaluation of any peer (written when training begins, after
    the --min-peers wait or a state transfer), so a peer that waited is not drawn behind the
    others. Without start lines (older files) each peer keeps its own clock and t0 is None."""
    timed = [(name, rows, wall_times(rows)) for name, rows in peers]
    firsts = [w for _, rows, walls in timed for r, w in zip(rows, walls) if r.get("event") == "eval" and w is not None]
    t0 = min(firsts) if firsts and all(any(w is not None for w in walls) for _, _, walls in timed) else None
    curves = []
    for name, rows, walls in timed:
        x = (lambda r, w: w - t0) if t0 is not None else (lambda r, w: r["t"])
        pts = [(x(r, w), r["test_acc"]) for r, w in zip(rows, walls)
               if r.get("event") == "eval" and r.get("test_acc") is not None]
        events = [x(r, w) for r, w in zip(rows, walls) if r.get("event") in ("join", "leave", "dead", "joined")]
        curves.append((name, [p[0] for p in pts], [p[1] for p in pts], events))
    return curves, t0


def accuracy_ylim(curves):
    """The whole curve: from 0 (or below, never for an accuracy) to a little above the best."""
    ys = [y for _, _, ys, _ in curves for y in ys]
    top = max(ys) if ys else 1.0
    return 0.0, min(1.0, top + 0.05) if top > 0.2 else max(top * 1.1, 0.1)

if __name__ == "__main__":
    main()
