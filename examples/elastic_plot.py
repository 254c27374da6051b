#!/usr/bin/env python3
"""Plot of an elastic run (examples/elastic.sh): every peer's test accuracy against the run's
time, with the kill / leave / join / resume events marked; prints the measured figures (time
to detect the crash, joiners' time from start to first step and first accuracy, the dip)."""
import glob
import json
import os
import sys


def main(out):
    t0 = None
    events = []
    if os.path.exists(os.path.join(out, "events.txt")):
        for line in open(os.path.join(out, "events.txt")):
            parts = line.split()
            if parts[0] == "t0":
                t0 = float(parts[1])  # the script's clock: events and peers on one axis
                continue
            events.append((float(parts[0]), parts[1], parts[2]))
    runs = {}
    for f in sorted(glob.glob(os.path.join(out, "p*.jsonl"))):
        name = os.path.splitext(os.path.basename(f))[0]
        lives, cur = [], None
        for l in open(f):
            r = json.loads(l)
            if r["event"] == "start":
                cur = {"base": r["unix_time"] - r["t_offset"], "rows": []}
                lives.append(cur)
            if cur is not None:
                cur["rows"].append(r)
        runs[name] = lives
    bases = [life["base"] for lives in runs.values() for life in lives]
    if not bases:
        sys.exit("no metrics")
    if t0 is None:
        t0 = min(bases)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    print(f"{'peer':<6}{'life':>5}{'first eval t':>14}{'first acc':>11}{'last acc':>10}{'steps':>8}")
    for name, lives in runs.items():
        for k, life in enumerate(lives):
            ev = [r for r in life["rows"] if r["event"] == "eval"]
            if not ev:
                continue
            xs = [life["base"] - t0 + r["t"] for r in ev]
            ax.plot(xs, [r["test_acc"] for r in ev], marker=".", label=f"{name}" + (f" (life {k + 1})" if len(lives) > 1 else ""))
            print(f"{name:<6}{k + 1:>5}{xs[0]:>14.1f}{ev[0]['test_acc']:>11.4f}{ev[-1]['test_acc']:>10.4f}{ev[-1]['step']:>8}")
            st = next((r for r in life["rows"] if r["event"] == "state_received"), None)
            if st:
                print(f"       state transfer from {st['peer']} at step {st['step']}, "
                      f"{life['base'] - t0 + st['t'] - (life['base'] - t0 + life['rows'][0]['t']):.2f} s after it started listening")
    for t, what, who in events:
        ax.axvline(t, color="grey", lw=0.8, ls="--")
        ax.text(t, 0.02, f" {what} {who}", rotation=90, fontsize=7, transform=ax.get_xaxis_transform())
    # Detection: the first 'dead' line about the killed peer in each survivor.
    kill = next((e for e in events if e[1] == "kill"), None)
    if kill:
        killed_ids = set()
        for life in runs.get(kill[2], []):
            killed_ids |= {r["peer"] for r in life["rows"] if r["event"] == "start"}
        for name, lives in runs.items():
            for life in lives:
                for r in life["rows"]:
                    if r["event"] == "dead" and r["peer"] in killed_ids:
                        print(f"{name} declared {kill[2]} dead {life['base'] - t0 + r['t'] - kill[0]:.2f} s after the kill")
                        break
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.5, 0.92)
    ax.set_title("Rumor elastic run: 4 peers, one killed, one leaving, two joining, one resumed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "elastic.png"), dpi=120)
    print(f"wrote {os.path.join(out, 'elastic.png')}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/elastic")
