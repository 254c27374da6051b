#!/usr/bin/env python3
"""Compare a simulated quickstart (rumor-sim events.csv) with a real one (rumor-peer p*.jsonl).

    bench/sim_compare.py --real DIR_WITH_p1..p4.jsonl --sim RUMOR_SIM_OUT_DIR

Peers are matched by shard: the real p1..p4 (--shard 1/4..4/4) are the simulated p0..p3.
Wall time: the daemon's `done.wall_s` (training loop + settle + evaluations, after loading and
state transfer) against the simulated `done` row's value (the same span in virtual time).
Accuracy: the k-th evaluation of each peer (at the start, after every epoch, at the end), real
against simulated, in points of test accuracy, with the steps of both.
Exit status 0 always: this reports, the thresholds are read by people (docs/sim.md).
"""
import argparse
import csv
import glob
import json
import os
import sys


def real_peers(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "p*.jsonl"))):
        name = os.path.basename(path)[:-6]
        evals, done = [], None
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") == "eval":
                    evals.append((e["step"], e["test_acc"]))
                elif e.get("event") == "done":
                    done = e
        k = int(name[1:]) - 1  # shard k+1/4 <-> simulated p<k>
        out[k] = {"evals": evals, "wall": done.get("wall_s") if done else None, "name": name}
    return out


def sim_peers(d):
    out = {}
    with open(os.path.join(d, "events.csv")) as f:
        for r in csv.DictReader(f):
            k = int(r["peer"][1:])
            p = out.setdefault(k, {"evals": [], "wall": None, "name": r["peer"]})
            if r["event"] == "eval":
                p["evals"].append((int(r["clock"]), float(r["value"])))
            elif r["event"] == "done":
                p["wall"] = float(r["value"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", required=True)
    ap.add_argument("--sim", required=True)
    a = ap.parse_args()
    real, sim = real_peers(a.real), sim_peers(a.sim)
    if not real:
        print("no p*.jsonl in", a.real)
        return 0
    print("peer   wall real   wall sim   error")
    walls = []
    for k in sorted(real):
        r, s = real[k], sim.get(k)
        if not s or r["wall"] is None or s["wall"] is None:
            print(f"{r['name']:5s}  (missing)")
            continue
        err = (s["wall"] - r["wall"]) / r["wall"]
        walls.append((r["wall"], s["wall"]))
        print(f"{r['name']:5s}  {r['wall']:8.2f} s {s['wall']:8.2f} s  {100 * err:+6.1f}%")
    if walls:
        mr = sum(w[0] for w in walls) / len(walls)
        ms = sum(w[1] for w in walls) / len(walls)
        print(f"mean   {mr:8.2f} s {ms:8.2f} s  {100 * (ms - mr) / mr:+6.1f}%")
        xr, xs = max(w[0] for w in walls), max(w[1] for w in walls)
        print(f"max    {xr:8.2f} s {xs:8.2f} s  {100 * (xs - xr) / xr:+6.1f}%   (the run's training wall time)")
    print()
    print("peer   eval  step real  step sim   acc real  acc sim   diff (points)")
    diffs = []
    for k in sorted(real):
        r, s = real[k], sim.get(k)
        if not s:
            continue
        for i, ((sr, ar), (ss, as_)) in enumerate(zip(r["evals"], s["evals"])):
            d = 100 * (as_ - ar)
            diffs.append(abs(d))
            print(f"{r['name']:5s}  {i:4d}  {sr:9d}  {ss:8d}   {ar:8.4f}  {as_:7.4f}   {d:+6.2f}")
    if diffs:
        print(f"\naccuracy, k-th evaluation against k-th: mean |diff| {sum(diffs) / len(diffs):.2f} points, "
              f"max {max(diffs):.2f} points over {len(diffs)} evaluations")
    # Against steps: the simulated curve of the same peer, interpolated at the real steps.
    by_step = []
    for k in sorted(real):
        s = sim.get(k)
        if not s or len(s["evals"]) < 2:
            continue
        xs = [e[0] for e in s["evals"]]
        ys = [e[1] for e in s["evals"]]
        for sr, ar in real[k]["evals"]:
            if sr < xs[0] or sr > xs[-1]:
                continue
            for i in range(1, len(xs)):
                if xs[i] >= sr:
                    f = 0.0 if xs[i] == xs[i - 1] else (sr - xs[i - 1]) / (xs[i] - xs[i - 1])
                    by_step.append(abs(100 * (ys[i - 1] + f * (ys[i] - ys[i - 1]) - ar)))
                    break
    if by_step:
        print(f"accuracy against steps (simulated curve interpolated at the real steps): mean |diff| "
              f"{sum(by_step) / len(by_step):.2f} points, max {max(by_step):.2f} points over {len(by_step)} evaluations")
    finals = [(real[k]["evals"][-1][1], sim[k]["evals"][-1][1]) for k in sorted(real) if k in sim and real[k]["evals"] and sim[k]["evals"]]
    if finals:
        print(f"final accuracy: real {sum(f[0] for f in finals) / len(finals):.4f}, simulated "
              f"{sum(f[1] for f in finals) / len(finals):.4f} (mean over peers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
