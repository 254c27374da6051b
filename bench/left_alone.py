#!/usr/bin/python3
"""A peer left alone, with real processes (issue: "no peer degrades when left alone").

4 rumor-peer processes on loopback train the quickstart MLP on Fashion-MNIST shards with a
budget per peer (--epochs E, 3 by default). Peer 4 runs 2x slower (--throttle 2) and evaluates
every 25 steps;
the others settle 0 s and leave as soon as they finish, so peer 4 trains its last steps alone.
For each round, with --lr-follows-peers true and false, it prints peer 4's last evaluation
before its last neighbour stopped training (its last averaged one), the lowest evaluation over
the following 100 steps, the drop between them (the target: at most 0.005), and the final
accuracies. Medians over the rounds at the end.

Usage: bench/left_alone.py [--build build] [--rounds 3] [--epochs 3] [--throttle 2] [--out out/left-alone]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from chaos import lines  # noqa: E402  (a metrics file's lines of one kind)




def wall(path, d):
    """A metrics line's time on the wall clock (each file counts t from its own start)."""
    start = lines(path, "start")[0]
    return start["unix_time"] - start["t"] + d["t"]


def one_run(a, follow, round_no):
    out = os.path.join(a.out, f"{'on' if follow else 'off'}-{round_no}")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    flags = subprocess.run([os.path.join(a.build, "sim", "rumor-sim"), os.path.join(HERE, "..", "examples", "sim",
                            "quickstart.ini"), "--peer-flags", "all", "--set", f"workload.epochs={a.epochs}"],
                           check=True, capture_output=True, text=True).stdout.split("\n")
    flags = [f.split() for f in flags if f.strip()]
    peer = os.path.join(a.build, "peer", "rumor-peer")
    procs = []
    seed = None
    for i, fl in enumerate(flags):
        extra = ["--settle", "0", f"--lr-follows-peers={str(follow).lower()}"]
        if i == 3:
            extra += ["--throttle", str(a.throttle), "--eval-every", "25"]
        cmd = [peer, "--listen", "127.0.0.1:0", *fl, *extra, "--name", f"p{i + 1}", "--metrics",
               os.path.join(out, f"p{i + 1}.jsonl")]
        if seed:
            cmd += ["--join", seed]
        log = open(os.path.join(out, f"p{i + 1}.log"), "w")
        procs.append(subprocess.Popen(cmd, stderr=log, stdout=log))
        if i == 0:
            deadline = time.time() + 60
            while not seed and time.time() < deadline:
                time.sleep(0.1)
                m = re.search(r"listening on ([0-9.]+:[0-9]+)", open(os.path.join(out, "p1.log")).read())
                seed = m.group(1) if m else None
            if not seed:
                sys.exit("p1 did not start listening: see " + out)
    for p in procs:
        try:
            p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            sys.exit(f"a peer ran past 600 s: see {out}")
        if p.returncode != 0:
            sys.exit(f"a peer failed (exit {p.returncode}): see {out}")
    m = [os.path.join(out, f"p{i}.jsonl") for i in range(1, 5)]
    # When the last of the others stopped training: its "settled" line minus the settling time.
    ends = []
    for path in m[:3]:
        s = lines(path, "settled")
        d = lines(path, "done")[-1]
        ends.append(wall(path, s[0]) - s[0].get("seconds", 0) if s else wall(path, d))
    alone_at = max(ends)
    evals = [(wall(m[3], e), e["step"], e["test_acc"]) for e in lines(m[3], "eval")]
    before = [e for e in evals if e[0] <= alone_at]
    after = [e for e in evals if e[0] > alone_at]
    if not before or not after:
        return None
    last = before[-1]
    window = [e for e in after if e[1] <= last[1] + 100]
    low = min(e[2] for e in window) if window else after[0][2]
    finals = [lines(p, "done")[-1]["test_acc"] for p in m]
    r = dict(follow=follow, alone_step=last[1], last_averaged=last[2], low_100=low, drop=last[2] - low,
             final_slow=finals[3], final_others=finals[:3], steps_slow=lines(m[3], "done")[-1]["steps"])
    print(f"lr_follows_peers={'true ' if follow else 'false'} round {round_no}: alone from step {last[1]}: "
          f"last averaged {last[2]:.4f}, lowest in the next 100 steps {low:.4f} (drop {100 * r['drop']:+.2f} "
          f"points); final {finals[3]:.4f} (others {', '.join(f'{x:.4f}' for x in finals[:3])})", flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--throttle", type=float, default=2, help="how much slower peer 4 steps (default 2: it is "
                    "alone for about its second half)")
    ap.add_argument("--out", default="out/left-alone")
    a = ap.parse_args()
    if not os.path.isfile("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"):
        sys.exit("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    res = {True: [], False: []}
    for k in range(1, a.rounds + 1):
        for follow in (False, True):
            r = one_run(a, follow, k)
            if r:
                res[follow].append(r)
    for follow in (False, True):
        rs = res[follow]
        if not rs:
            continue
        print(f"median over {len(rs)} rounds, lr_follows_peers={'true' if follow else 'false'}: drop "
              f"{100 * statistics.median(r['drop'] for r in rs):+.2f} points (worst "
              f"{100 * max(r['drop'] for r in rs):+.2f}), slow peer's final "
              f"{statistics.median(r['final_slow'] for r in rs):.4f}, others' "
              f"{statistics.median(x for r in rs for x in r['final_others']):.4f}")


if __name__ == "__main__":
    main()
