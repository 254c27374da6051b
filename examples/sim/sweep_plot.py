#!/usr/bin/env python3
"""Comparison plots of a rumor-sim sweep (a scenario with a [sweep] section).

    examples/sim/sweep_plot.py OUT_DIR        (rumor-sim --plot runs it for you)

Reads OUT_DIR/sweep.csv and OUT_DIR/runs.csv (docs/sim.md, "Sweeps") and writes
  sweep_accuracy.png   test accuracy of the average model against virtual time (log scale), one
                       panel per combination of the axes other than the algorithm and the seed,
                       one colour per algorithm, one line per seed;
  sweep_time.png       time to the target accuracy (mean over the seeds that reached it; a
                       missing bar: never reached), per panel and algorithm;
  sweep_bytes.png      megabytes sent per peer until the target, the same way.
The axis named `algorithm` (or algorithm.kind) gives the colours; without one, the first axis.
Needs matplotlib (python3-matplotlib).
"""
import csv
import math
import os
import sys
from collections import OrderedDict, defaultdict


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    try:
        rows = list(csv.DictReader(open(os.path.join(out, "sweep.csv"))))
        runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
    except OSError as e:
        print(f"sweep_plot.py: {e}", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sweep_plot.py: matplotlib is missing (apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    if not runs:
        print("sweep_plot.py: no runs", file=sys.stderr)
        return 1
    cols = list(runs[0].keys())
    axes = cols[1:cols.index("target")]
    colour_axis = next((a for a in axes if a in ("algorithm", "algorithm.kind")), axes[0])
    seed_axes = [a for a in axes if a in ("seeds", "seed", "run.seed")]
    panel_axes = [a for a in axes if a != colour_axis and a not in seed_axes]
    target = runs[0]["target"]

    def panel_of(r):
        return tuple(r[a] for a in panel_axes)

    panels = list(OrderedDict.fromkeys(panel_of(r) for r in runs))
    algos = list(OrderedDict.fromkeys(r[colour_axis] for r in runs))
    colours = {a: plt.cm.tab10(i % 10) for i, a in enumerate(algos)}
    series = defaultdict(lambda: ([], []))
    for r in rows:
        t, acc = float(r["time"]), float(r["test_acc"]) if r["test_acc"] not in ("", "nan") else math.nan
        s = series[r["run"]]
        s[0].append(t)
        s[1].append(acc)

    def title(p):
        return ", ".join(f"{a}={v}" for a, v in zip(panel_axes, p)) or "all"

    cols_n = min(4, len(panels))
    rows_n = (len(panels) + cols_n - 1) // cols_n
    fig, axs = plt.subplots(rows_n, cols_n, figsize=(4.2 * cols_n, 3.3 * rows_n), squeeze=False, sharey=True)
    for k, p in enumerate(panels):
        ax = axs[k // cols_n][k % cols_n]
        labelled = set()
        for r in runs:
            if panel_of(r) != p:
                continue
            t, acc = series[r["run"]]
            a = r[colour_axis]
            ax.plot([max(x, 1e-3) for x in t], acc, color=colours[a], lw=1, alpha=0.85,
                    label=a if a not in labelled else None)
            labelled.add(a)
        ax.axhline(float(target), color="grey", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_title(title(p), fontsize=8)
        ax.set_xlabel("virtual time (s)", fontsize=8)
        ax.set_ylim(0.4, 0.9)
        ax.grid(alpha=0.3)
        if k % cols_n == 0:
            ax.set_ylabel("test accuracy (average model)", fontsize=8)
        if k == 0:
            ax.legend(fontsize=7)
    for k in range(len(panels), rows_n * cols_n):
        axs[k // cols_n][k % cols_n].axis("off")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sweep_accuracy.png"), dpi=90)
    plt.close(fig)

    def bars(field, scale, ylabel, name):
        fig, ax = plt.subplots(figsize=(min(14, max(6, 0.2 * len(panels) * len(algos))), 5))
        width = 0.8 / len(algos)
        for j, a in enumerate(algos):
            xs, ys, es = [], [], []
            for k, p in enumerate(panels):
                v = [float(r[field]) * scale for r in runs if panel_of(r) == p and r[colour_axis] == a and r[field] != ""]
                if not v:
                    continue
                m = sum(v) / len(v)
                sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0
                xs.append(k + (j - (len(algos) - 1) / 2) * width)
                ys.append(m)
                es.append(sd)
            ax.bar(xs, ys, width, yerr=es, color=colours[a], label=a)
        ax.set_xticks(range(len(panels)))
        ax.set_xticklabels([title(p).replace(", ", "\n") for p in panels], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} (target accuracy {target}; no bar: not reached)", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, ncol=min(3, len(algos)), loc="upper center", bbox_to_anchor=(0.5, -0.18))
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)

    bars("time_to_target", 1.0, "time to target (s)", "sweep_time.png")
    bars("bytes_per_peer_to_target", 1e-6, "MB sent per peer to target", "sweep_bytes.png")
    print(f"sweep_plot.py: wrote sweep_accuracy.png, sweep_time.png, sweep_bytes.png in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
