#!/usr/bin/env python3
"""Plots of a rumor-sim run: accuracy, loss and consensus distance against virtual time.

    examples/sim/plot.py OUT_DIR        (rumor-sim --plot runs it for you)

Reads OUT_DIR/timeseries.csv (docs/sim.md) and writes OUT_DIR/accuracy.png, loss.png and
consensus.png. The average model is a solid line; the mean of the sampled peers' own models
dashed (with the worst of them dotted, for accuracy). Needs matplotlib (python3-matplotlib).
"""
import csv
import math
import os
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    path = os.path.join(out, "timeseries.csv")
    try:
        rows = list(csv.DictReader(open(path)))
    except OSError as e:
        print(f"plot.py: cannot read {path}: {e}", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is missing (apt-get install python3-matplotlib)", file=sys.stderr)
        return 1

    def col(name):
        v = []
        for r in rows:
            try:
                x = float(r[name])
            except (KeyError, ValueError):
                x = float("nan")
            v.append(x)
        return v

    t = col("time")
    figs = [
        ("accuracy.png", "test accuracy", [("test_acc", "average model", "-"), ("peer_acc", "peers (mean)", "--"),
                                           ("peer_acc_min", "peers (worst)", ":")], False),
        ("loss.png", "test loss", [("loss", "average model", "-"), ("peer_loss", "peers (mean)", "--")], True),
        ("consensus.png", "consensus distance", [("consensus_distance", "sqrt(mean |x_i - xbar|^2) / |xbar|", "-")], True),
    ]
    summary = {}
    try:
        import json
        summary = json.load(open(os.path.join(out, "summary.json")))
    except (OSError, ValueError):
        pass
    title = os.path.basename(str(summary.get("scenario", out)))
    for name, ylabel, series, logy in figs:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = False
        for key, label, style in series:
            y = col(key)
            if logy:
                y = [v if v > 0 else float("nan") for v in y]
            if all(math.isnan(v) for v in y) or (not logy and all(v == 0 for v in y if not math.isnan(v))):
                continue
            ax.plot(t, y, style, label=label)
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("virtual time (s)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {ylabel}")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        print(f"plot.py: wrote {os.path.join(out, name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
