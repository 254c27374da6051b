#!/usr/bin/python3
"""A quick look at a training recipe for the torch quickstart's CNN without a swarm: one process
trains it with the swarm's effective batch (--peers x --batch: what 4 peers averaging after
every step, or DDP, add up to per step) for the swarm's steps (--epochs over the whole training
set), and prints the test accuracy along the way and at the end. A proxy, not a measurement of
the swarm: use it to choose a learning rate and schedule, then check with bench/torch_bench.py.

    /usr/bin/python3 bench/torch_recipe.py --lr 2e-3 --lr-schedule wsd [--seed 2]

The model, data loading, schedules and evaluation are examples/torch_quickstart.py's.
"""
import argparse
import math
import os
import sys
import time

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
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--evals", type=int, default=6, help="evaluations along the way")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = qs.fashion_mnist(a.data)
    torch.manual_seed(a.seed)
    model = qs.make_model("cnn")
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    batch = a.peers * a.batch
    per_epoch = math.ceil(len(xtr) / batch)
    total = math.ceil(a.epochs * per_epoch)
    sched = qs.lr_scheduler(opt, a.lr_schedule, total, a.decay_fraction)
    g = torch.Generator().manual_seed(a.seed)
    every = max(1, total // a.evals)
    step, path, t0 = 0, [], time.perf_counter()
    while step < total:
        order = torch.randperm(len(xtr), generator=g)
        for b in range(per_epoch):
            if step >= total:
                break
            idx = order[b * batch:(b + 1) * batch]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
            if sched:
                sched.step()
            step += 1
            if step % every == 0 and step < total:
                acc = qs.evaluate(model, xte, yte)[0]
                path.append(f"{step}:{acc:.4f}")
                print(f"step {step}/{total} test_acc {acc:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    acc = qs.evaluate(model, xte, yte)[0]
    print(f"lr {a.lr} {a.lr_schedule} (decay {a.decay_fraction}) seed {a.seed} batch {batch} x {total} steps: "
          f"final test_acc {acc:.4f}; along the way {' '.join(path)}", flush=True)


if __name__ == "__main__":
    main()
