#!/usr/bin/python3
"""A quick look at a training recipe for the torch quickstart's CNN without a swarm: one process
trains it with the swarm's effective batch (--peers x --batch: what 4 peers averaging after
every step, or DDP, add up to per step) for the swarm's steps (--epochs over the whole training
set), and prints the test accuracy along the way and at the end. A proxy, not a measurement of
the swarm: use it to choose a learning rate and schedule, then check with bench/torch_bench.py.

    /usr/bin/python3 bench/torch_recipe.py --lr 2e-3 --lr-schedule wsd [--seed 2]

The loop is examples/torch_quickstart.py's worker without Rumor (--plain, one shard of one):
the same model, data, schedules and evaluation as the swarm and bench/torch_bench.py's reference.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import torch_quickstart as qs  # noqa: E402

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lr", type=float, default=qs.RECIPE["lr"])
    ap.add_argument("--lr-schedule", choices=qs.SCHEDULES, default=qs.RECIPE["lr_schedule"])
    ap.add_argument("--decay-fraction", type=float, default=qs.RECIPE["decay_fraction"])
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64, help="per peer")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--evals", type=int, default=6, help="evaluations along the way")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    batch = a.peers * a.batch
    print(f"lr {a.lr} {a.lr_schedule} (decay {a.decay_fraction}) seed {a.seed}: batch {batch}, {a.epochs} epochs",
          flush=True)
    return qs.main(["--worker", "--plain", "--peers", "1", "--shard", "1", "--batch", str(batch),
                    "--epochs", str(a.epochs), "--eval-every-epochs", str(a.epochs / a.evals),
                    "--lr", str(a.lr), "--lr-schedule", a.lr_schedule, "--decay-fraction", str(a.decay_fraction),
                    "--seed", str(a.seed), "--data", a.data])


if __name__ == "__main__":
    sys.exit(main())
