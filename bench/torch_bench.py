#!/usr/bin/python3
"""The Python module's targets (issue 14), measured on this machine in one run:

  accuracy   4 Python peers (examples/torch_quickstart.py: the 2-conv CNN, its recipe, batch 64,
             Fashion-MNIST shards, --epochs) reach >= 0.90 test accuracy each; beside it the
             single-process PyTorch reference (same CNN, optimizer, batch and epochs, the whole
             training set, one process).
  overhead   samples/s of a Python peer gossiping at H=1 >= 0.9x the same torch loop without
             gossip: 4 gossiping peers against 4 plain loops started the same way (the same CPU
             contention), --steps each, no evaluation; medians over --repeats, alternated.
  ddp        wall time to --target (0.88) test accuracy against torch DDP (gloo, 4 processes,
             same CNN and batch: bench/ddp_fmnist.py --model cnn, rank 0 evaluating every
             --eval-every steps), both with their evaluations in the clock, --repeats rounds of
             a swarm in which p1 alone evaluates (as DDP's rank 0) then DDP. (The accuracy runs,
             where every peer evaluates, print their times too: 4x the evaluation work.)
             Both clocks start when training starts: DDP's after rank 0's first evaluation and
             the barrier behind it, a peer's at its step-0 evaluation line (the quickstart
             evaluates the initial model before joining, and the swarm waits for all --peers
             peers before the first step, as DDP's ranks wait for rank 0).

--staleness TAU goes to every swarm run (the quickstart's --staleness; default inf).
The recipe (--lr, --lr-schedule, --decay-fraction; by default the quickstart's: Adam 2e-3, held for 70%
of each run's steps, then decayed linearly to 0) goes to every run: the swarm's peers, the
single-process reference and DDP alike.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/torch_bench.py [--out DIR] [--repeats R]
       [--only accuracy,overhead,ddp]
Writes DIR/results.json and prints one line per measurement.
"""
import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
QUICKSTART = os.path.join(ROOT, "examples", "torch_quickstart.py")
sys.path.insert(0, os.path.join(ROOT, "examples"))
from torch_quickstart import RECIPE, SCHEDULES  # noqa: E402  (numpy only at import)


def recipe(a):
    """The training recipe's flags, the same for every run (swarm, reference, DDP)."""
    return ["--lr", str(a.lr), "--lr-schedule", a.lr_schedule, "--decay-fraction", str(a.decay_fraction)]


def run(cmd, timeout):
    t0 = time.monotonic()
    # In its own process group, so that a timeout stops the whole run (the peers, DDP's ranks),
    # not just the launcher, leaving its children spinning.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        sys.exit(f"timed out after {timeout:.0f} s (stopped): {' '.join(cmd)}\n{out[-2000:]}\n{err[-3000:]}")
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{out[-2000:]}\n{err[-3000:]}")
    return out, time.monotonic() - t0


def evals(path):
    out = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "eval":
                out.append(r)
    return out


def first_at_target(path, target):
    """The first eval line of a metrics file with test_acc >= target, or None; its "t" counts
    from the step-0 evaluation line (when training starts), not from the peer's start."""
    ev = evals(path)
    t0 = next((e["t"] for e in ev if e.get("step") == 0), 0.0)
    hit = next((e for e in ev if e["test_acc"] >= target), None)
    return dict(hit, t=hit["t"] - t0) if hit else None


def after_best(path):
    """The best evaluation of a metrics file, and how far below it the lowest one after it fell
    (points of accuracy, as a fraction): a peer that degrades once it is left alone shows here."""
    ev = [e["test_acc"] for e in evals(path)]
    if not ev:
        return math.nan, math.nan
    k = max(range(len(ev)), key=lambda i: ev[i])
    return ev[k], ev[k] - min(ev[k:])


def reference(a):
    """Single process, whole training set: the quickstart's worker with one shard of one."""
    out, wall = run([sys.executable, QUICKSTART, "--worker", "--plain", "--peers", "1", "--shard", "1",
                     "--epochs", str(a.epochs), "--eval-every", "-1", "--seed", str(a.seed)] + recipe(a), a.timeout)
    f = [l for l in out.splitlines() if l.startswith("final ")][-1].split()
    d = {f[i]: float(f[i + 1]) for i in range(1, len(f) - 1, 2)}
    d["wall_s"] = wall
    return d


def swarm(a, out_dir, extra, timeout):
    run([sys.executable, QUICKSTART, "--out", out_dir, "--peers", str(a.peers), "--epochs", str(a.epochs),
         "--seed", str(a.seed), "--staleness", a.staleness] + recipe(a) + extra +
        (["--mix-weight", a.mix_weight] if a.mix_weight else []), timeout)
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "torch_bench"))
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300, help="steps per peer in the overhead runs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--staleness", default="inf", help="the swarm's staleness bound TAU (default inf)")
    ap.add_argument("--lr", type=float, default=RECIPE["lr"], help="Adam's learning rate, every run")
    ap.add_argument("--lr-schedule", choices=SCHEDULES, default=RECIPE["lr_schedule"],
                    help="the learning-rate schedule of every run: swarm, reference and DDP alike")
    ap.add_argument("--decay-fraction", type=float, default=RECIPE["decay_fraction"],
                    help="wsd: the part of the steps over which the rate decays to 0")
    ap.add_argument("--mix-weight", choices=("uniform", "samples"), default=None,
                    help="the swarm's averaging weights (default: the quickstart's, samples)")
    ap.add_argument("--swarm-epochs", type=float, default=0,
                    help="the race's swarm: a swarm-wide budget of this many passes instead of --epochs per peer "
                         "(DDP still runs --epochs)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--only", default="accuracy,overhead,ddp")
    a = ap.parse_args()
    only = set(a.only.split(","))
    os.makedirs(a.out, exist_ok=True)
    res = {}

    if "overhead" in only:
        plain, gossip = [], []
        for r in range(a.repeats):
            p = swarm(a, os.path.join(a.out, f"plain{r}"), ["--plain", "--steps", str(a.steps), "--eval-every", "-1"],
                      a.timeout)
            g = swarm(a, os.path.join(a.out, f"gossip{r}"), ["--steps", str(a.steps), "--eval-every", "-1",
                                                                "--local-steps", "1", "--settle", "0", "--settle-max", "0"], a.timeout)
            inside = statistics.median(v["rumor_s"] / v["train_s"] for v in g.values())
            print(f"overhead run {r}: Rumor's part of each gossip step (protocol, copies, waits) is "
                  f"{100 * inside:.1f}% of the step time (in-process, whatever the machine's load)", flush=True)
            plain.append(statistics.median(v["samples_per_s"] for v in p.values()))
            gossip.append(statistics.median(v["samples_per_s"] for v in g.values()))
            print(f"overhead run {r}: plain {plain[-1]:.0f} samples/s per process, gossip H=1 {gossip[-1]:.0f} "
                  f"(ratio {gossip[-1] / plain[-1]:.3f})", flush=True)
        res["overhead"] = {"plain_samples_per_s": plain, "gossip_samples_per_s": gossip,
                           "ratio_of_medians": statistics.median(gossip) / statistics.median(plain),
                           "ratios": [g / p for g, p in zip(gossip, plain)]}
        print(f"overhead: gossip/plain samples/s = {res['overhead']['ratio_of_medians']:.3f} (target >= 0.9)",
              flush=True)

    if "accuracy" in only:
        runs = []
        for r in range(a.repeats):
            d = os.path.join(a.out, f"swarm{r}")
            s = swarm(a, d, ["--eval-every", str(a.eval_every)], a.timeout)
            hits = [first_at_target(os.path.join(d, f"p{k}.jsonl"), a.target) for k in range(1, a.peers + 1)]
            to_target = [h["t"] if h else math.nan for h in hits]
            accs = [s[f"p{k}"]["test_acc"] for k in range(1, a.peers + 1)]
            runs.append({"final_acc": accs, "time_to_target_s": to_target,
                         "samples_per_s": [s[f"p{k}"]["samples_per_s"] for k in range(1, a.peers + 1)]})
            print(f"swarm run {r}: final test_acc {' '.join(f'{x:.4f}' for x in accs)}; time to {a.target} "
                  f"(every peer evaluating): {' '.join(f'{x:.1f}' for x in to_target)} s", flush=True)
        res["swarm"] = runs
        worst = min(min(r["final_acc"]) for r in runs)
        print(f"accuracy: the worst peer of {len(runs)} runs {worst:.4f} (target >= 0.90)", flush=True)
        ref = reference(a)
        res["reference"] = ref
        print(f"single-process reference: test_acc {ref['test_acc']:.4f} ({ref['samples_per_s']:.0f} samples/s)",
              flush=True)

    if "ddp" in only:
        # The race, --repeats rounds of a Rumor swarm then DDP: DDP evaluates on rank 0 only, so
        # in the swarm only p1 evaluates (the peers end within about 0.001 of each other).
        races = []
        for r in range(a.repeats):
            d = os.path.join(a.out, f"race{r}")
            sw = swarm(a, d, ["--eval-every", str(a.eval_every), "--eval-peers", "1"]
                       + (["--swarm-epochs", str(a.swarm_epochs)] if a.swarm_epochs else []), a.timeout)
            best, fall = after_best(os.path.join(d, "p1.jsonl"))
            hit = first_at_target(os.path.join(d, "p1.jsonl"), a.target)
            out, _ = run([sys.executable, os.path.join(HERE, "ddp_fmnist.py"), "--model", "cnn", "--world",
                          str(a.peers), "--epochs", str(a.epochs), "--target", str(a.target), "--eval-every",
                          str(a.eval_every), "--seed", str(a.seed)] + recipe(a), a.timeout)
            ddp = {l.split()[0]: l.split()[1] for l in out.splitlines() if l.startswith("ddp_") and " " in l}
            race = {"rumor_p1_time_to_target_s": hit["t"] if hit else math.nan,
                    "rumor_p1_step_at_target": hit["step"] if hit else math.nan,
                    "ddp_time_to_target_s": float(ddp["ddp_time_to_target_s"]),
                    "ddp_step_at_target": int(ddp["ddp_step_at_target"]),
                    "ddp_time_to_target_train_s": float(ddp["ddp_time_to_target_train_s"]),
                    "ddp_final_acc": float(ddp["ddp_final_acc"]),
                    "rumor_final_acc": [sw[f"p{k}"]["test_acc"] for k in range(1, a.peers + 1)],
                    "rumor_steps": [sw[f"p{k}"]["steps"] for k in range(1, a.peers + 1)],
                    "rumor_p1_best": best, "rumor_p1_fall_after_best": fall}
            race["ratio"] = race["rumor_p1_time_to_target_s"] / race["ddp_time_to_target_s"]
            races.append(race)
            print(f"race {r}: time to {a.target}: Rumor p1 {race['rumor_p1_time_to_target_s']:.1f} s (its step "
                  f"{race['rumor_p1_step_at_target']}), DDP gloo {a.peers} processes {race['ddp_time_to_target_s']:.1f} s "
                  f"(step {race['ddp_step_at_target']}; training only {race['ddp_time_to_target_train_s']:.1f} s; "
                  f"final acc {race['ddp_final_acc']:.4f}): ratio {race['ratio']:.2f}; the swarm's final test_acc "
                  f"{' '.join(f'{x:.4f}' for x in race['rumor_final_acc'])} (steps "
                  f"{' '.join(f'{x:.0f}' for x in race['rumor_steps'])}); p1's best {best:.4f}, lowest after it "
                  f"{100 * fall:.2f} points below", flush=True)
        res["race"] = races
        med_r = statistics.median(x["rumor_p1_time_to_target_s"] for x in races)
        med_d = statistics.median(x["ddp_time_to_target_s"] for x in races)
        print(f"time to {a.target}: Rumor {med_r:.1f} s, DDP {med_d:.1f} s (medians of {len(races)}); median ratio "
              f"{statistics.median(x['ratio'] for x in races):.2f} (target <= 1)", flush=True)
        spread = max(max(x["rumor_final_acc"]) - min(x["rumor_final_acc"]) for x in races)
        fall = max(x["rumor_p1_fall_after_best"] for x in races)
        print(f"p1 (evaluating, the slowest): final accuracies at most {spread:.4f} apart (target <= 0.005); its "
              f"evaluations at most {100 * fall:.2f} points below its best after it (target <= 1)", flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {os.path.join(a.out, 'results.json')}")


if __name__ == "__main__":
    main()
