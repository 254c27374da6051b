#!/usr/bin/env python3
"""Tables and plots for bench/compression_study.sh: final accuracy and MB sent per peer for each
(H, codec), the byte ratio against H=1 uncompressed, and the staleness throughput runs."""
import glob
import json
import os
import statistics
import sys


def load(d):
    peers = []
    for f in sorted(glob.glob(os.path.join(d, "m*.jsonl"))):
        rows = [json.loads(l) for l in open(f) if l.strip()]
        done = next((r for r in rows if r["event"] == "done"), None)
        peers.append((rows, done))
    return peers


def main(out):
    grid = {}
    for d in sorted(glob.glob(os.path.join(out, "H*-*"))):
        name = os.path.basename(d)
        h, codec = name[1:].split("-", 1)
        peers = load(d)
        if not peers or any(p[1] is None for p in peers):
            print(f"{name}: incomplete run, skipped")
            continue
        acc = statistics.mean(p[1]["test_acc"] for p in peers)
        mb = statistics.mean(p[1]["bytes_sent"] for p in peers) / 1e6
        grid[(int(h), codec)] = (acc, mb, min(p[1]["test_acc"] for p in peers))
    if grid:
        base = grid.get((1, "none"))
        print(f"\n{'H':>4} {'codec':<11} {'mean acc':>9} {'min acc':>8} {'MB/peer':>9} {'bytes vs H=1 none':>18} {'acc - H=1 none':>15}")
        order = ["none", "fp16", "int8", "int4", "topk"]
        key = lambda kv: (kv[0][0], order.index(kv[0][1].split("+")[0]) if kv[0][1].split("+")[0] in order else 9, kv[0][1])
        for (h, c), (acc, mb, mn) in sorted(grid.items(), key=key):
            ratio = f"1/{base[1] / mb:.0f}" if base and mb > 0 else "-"
            dacc = f"{(acc - base[0]) * 100:+.2f} pt" if base else "-"
            print(f"{h:>4} {c:<11} {acc:>9.4f} {mn:>8.4f} {mb:>9.1f} {ratio:>18} {dacc:>15}")
        t = grid.get((16, "int8"))
        if base and t:
            print(f"\ntarget H=16 int8: sends 1/{base[1] / t[1]:.0f} of H=1 none (need >= 1/50), accuracy {(t[0] - base[0]) * 100:+.2f} points (need within 1)")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            series = ["none", "fp16", "int8", "int4", "topk"] + sorted({c for (_, c) in grid if "+" in c})
            for c, m in zip(series, "osD^vP*Xh<>pd"):
                pts = sorted((mb, acc, h) for (h, cc), (acc, mb, _) in grid.items() if cc == c)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=m, label=c)
                    for mb, acc, h in pts:
                        ax.annotate(f"H={h}", (mb, acc), fontsize=7, xytext=(3, 3), textcoords="offset points")
            ax.set_xscale("log")
            ax.set_xlabel("MB sent per peer (log)")
            ax.set_ylabel("final test accuracy (mean of 4 peers)")
            ax.set_title("Rumor: accuracy against bytes, 4 peers, Fashion-MNIST")
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(os.path.join(out, "accuracy_vs_bytes.png"), dpi=120)
            print(f"wrote {os.path.join(out, 'accuracy_vs_bytes.png')}")
        except ImportError:
            print("matplotlib missing: no plot")

    # Staleness runs: stale-<kind>-r<k>, repeated; medians over the repeats.
    kinds = [("unthrottled", "no peer slow (all --throttle B)"), ("tauinf", "p1 5x slower, TAU=inf"),
             ("taugenerous", "p1 5x slower, TAU=200"), ("tau16", "p1 5x slower, TAU=16"),
             ("tau0", "p1 5x slower, TAU=0")]
    per = {}  # kind -> {repeat: (fast steps/s, slow steps/s, acc)}
    for d in sorted(glob.glob(os.path.join(out, "stale-*-r*"))):
        kind, rep = os.path.basename(d)[len("stale-"):].rsplit("-r", 1)
        peers = load(d)
        if len(peers) != 4 or any(p[1] is None for p in peers):
            print(f"{os.path.basename(d)}: incomplete")
            continue
        # fast peers: p2..p4 (files m2..m4); throughput = steps / training wall time
        fast = statistics.mean(p[1]["steps"] / p[1]["train_wall_s"] for p in peers[1:])
        slow = peers[0][1]["steps"] / peers[0][1]["train_wall_s"]
        acc = statistics.mean(p[1]["test_acc"] for p in peers)
        per.setdefault(kind, {})[int(rep)] = (fast, slow, acc)
    ref = per.get("unthrottled", {})
    if per:
        print(f"\n{'run':<32} {'n':>2} {'fast peers steps/s':>19} {'vs no slow peer':>16} {'(range)':>12} {'slow peer steps/s':>18} {'mean acc':>9}")
        for kind, label in kinds:
            reps = per.get(kind)
            if not reps:
                continue
            f = statistics.median(v[0] for v in reps.values())
            s = statistics.median(v[1] for v in reps.values())
            a = statistics.median(v[2] for v in reps.values())
            ratios = [v[0] / ref[r][0] for r, v in reps.items() if r in ref]
            rr = f"{statistics.median(ratios):.2f}" if ratios else "-"
            rng = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else ""
            print(f"{label:<32} {len(reps):>2} {f:>19.1f} {rr:>16} {rng:>12} {s:>18.1f} {a:>9.4f}")
        print("(medians over the repeats; 'vs no slow peer' is the median of the per-repeat ratios)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/compression")
