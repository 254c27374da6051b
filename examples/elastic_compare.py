#!/usr/bin/env python3
"""Side by side: the real elastic run (examples/elastic.sh, out/elastic) and its simulated twin
(rumor-sim examples/sim/elastic.ini): test accuracy against time, with the same events marked.

usage: elastic_compare.py REAL_DIR SIM_DIR OUT_PNG"""
import csv
import glob
import json
import os
import sys

EVENTS = [(10, "kill p1/p2"), (14, "leave"), (18, "join"), (20, "join"), (24, "restart")]


def real_curves(d):
    t0 = None
    ev = os.path.join(d, "events.txt")
    if os.path.exists(ev):
        for line in open(ev):
            p = line.split()
            if p[0] == "t0":
                t0 = float(p[1])
    curves = {}
    for f in sorted(glob.glob(os.path.join(d, "p*.jsonl"))):
        name = os.path.splitext(os.path.basename(f))[0]
        base, life = None, 0
        for l in open(f):
            r = json.loads(l)
            if r["event"] == "start":
                base = r["unix_time"] - r["t_offset"]
                life += 1
            elif r["event"] == "eval" and base is not None:
                key = name if life == 1 else f"{name} (life {life})"
                curves.setdefault(key, []).append((base - (t0 or base) + r["t"], r["test_acc"]))
    return curves


def main(real, sim, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for name, pts in real_curves(real).items():
        a.plot([p[0] for p in pts], [p[1] for p in pts], ".-", label=name, lw=1)
    a.set_title("real: rumor-peer processes on loopback")
    rows = list(csv.DictReader(open(os.path.join(sim, "timeseries.csv"))))
    t = [float(r["time"]) for r in rows]
    b.plot(t, [float(r["test_acc"]) for r in rows], label="average model")
    b.plot(t, [float(r["peer_acc"]) for r in rows], label="peers (mean)")
    b.plot(t, [float(r["peer_acc_min"]) for r in rows], label="peers (worst)", ls="--")
    b.set_title("simulated: rumor-sim examples/sim/elastic.ini")
    for ax in (a, b):
        for x, what in EVENTS:
            ax.axvline(x, color="grey", lw=0.8, ls="--")
            ax.text(x, 0.51, f" {what}", rotation=90, fontsize=7)
        ax.set_xlabel("seconds since the start")
        ax.set_ylim(0.5, 0.92)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    a.set_ylabel("test accuracy")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
