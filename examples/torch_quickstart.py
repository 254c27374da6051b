#!/usr/bin/python3
"""Rumor with your own PyTorch model: 4 Python peers on loopback train a small CNN (two conv
layers) on Fashion-MNIST shards through rumor.torch.GossipOptimizer, then the same table and
accuracy PNG as examples/quickstart.sh (examples/report.py over the peers' metrics files).

    PYTHONPATH=build/python /usr/bin/python3 examples/torch_quickstart.py [--out DIR]
    ... --mixed 2     a swarm of Python and C++ peers in one run: 2 Python peers training the
                      nn.Sequential equivalent of `rumor-peer --model mlp:256,128` with 2
                      rumor-peer processes (same fingerprint, same flat layout: they average).
                      --epochs is then a swarm-wide budget (--swarm-epochs): the fast rumor-peer
                      processes train until the swarm has done that many passes, and all end together.

Every peer is its own process, one thread each: this script in --worker mode, started by
rumor-run (build/bin/rumor-run), which gives each its shard, name, address, join list and metrics
file (RUMOR_* variables; docs/python.md "rumor-run"); --mixed peers are rumor-peer processes,
each started by its own rumor-run --join. Fashion-MNIST is read from the Debian package's IDX
files (/usr/share/datasets/fashion-mnist). docs/python.md.
"""
import argparse
import gzip
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(directory, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return read_idx(p)
    raise FileNotFoundError(f"{directory}: no {stem}[.gz] (apt-get install dataset-fashion-mnist)")


def fashion_mnist(directory):
    import torch
    x = lambda s: torch.from_numpy(load(directory, s).astype(np.float32) / 255.0).unsqueeze(1)
    y = lambda s: torch.from_numpy(load(directory, s).astype(np.int64))
    return (x("train-images-idx3-ubyte"), y("train-labels-idx1-ubyte"), x("t10k-images-idx3-ubyte"),
            y("t10k-labels-idx1-ubyte"))


def make_model(kind):
    from torch import nn
    if kind == "mlp":  # == rumor-peer --model mlp:256,128 (fingerprint mlp:784-256-128-10/ce/p235146/f32)
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    # The small CNN: two conv layers with batch norm (its running statistics are floating-point
    # buffers: averaged with the parameters), ~207k parameters.
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


SCHEDULES = ("constant", "cosine", "wsd")
# The training recipe's defaults (bench/torch_bench.py gives the same to the swarm, the
# single-process reference and DDP).
RECIPE = {"lr": 2e-3, "lr_schedule": "wsd", "decay_fraction": 0.3}


def lr_scheduler(optimizer, kind, total, decay_fraction=0.3):
    """The learning-rate schedule over `total` steps, as a torch scheduler (None: constant).
    cosine: from the optimizer's rate down to 0 (CosineAnnealingLR). wsd (warmup-stable-decay,
    here without warm-up): the rate held, then decayed linearly to 0 over the last
    `decay_fraction` of the steps; rumor-peer's --lr-schedule wsd --decay-fraction is the same."""
    import torch
    if kind == "constant":
        return None
    if kind == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
    if kind == "wsd":
        if not 0.0 <= decay_fraction <= 1.0:
            raise ValueError(f"decay fraction {decay_fraction}: expected a number in [0, 1]")
        start = total - min(total, math.floor(decay_fraction * total + 0.5))  # as core's llround
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda k: 1.0 if k < start else max(0.0, (total - k) / max(1, total - start)))
    raise ValueError(f"unknown learning-rate schedule {kind!r}: expected one of {', '.join(SCHEDULES)}")


def swarm_lr_scheduler(optimizer, gossip, kind, decay_fraction=0.3):
    """lr_scheduler's schedules over the swarm's progress towards a swarm-wide budget
    (gossip.swarm_progress, in [0, 1]) instead of this peer's steps, so that a slow peer anneals
    with the swarm; rumor-peer --swarm-epochs does the same."""
    import torch
    if kind == "constant":
        return None
    if kind == "cosine":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 0.5 * (1 + math.cos(math.pi * gossip.swarm_progress)))
    if kind == "wsd":
        d = max(1e-9, decay_fraction)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: min(1.0, (1 - gossip.swarm_progress) / d))
    raise ValueError(f"unknown learning-rate schedule {kind!r}: expected one of {', '.join(SCHEDULES)}")


def evaluate(model, x, y):
    import torch
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 2000):
            out = model(x[i:i + 2000])
            loss += float(torch.nn.functional.cross_entropy(out, y[i:i + 2000], reduction="sum"))
            correct += int((out.argmax(1) == y[i:i + 2000]).sum())
    model.train()
    return correct / len(x), loss / len(x)


def shard(n, k, parts, seed):
    """Rows of shard k (1-based) of `parts`: a seeded permutation cut in equal pieces (iid)."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[(k - 1) * n // parts:k * n // parts]


def worker(a):
    import torch
    torch.set_num_threads(1)
    if a.shard is None:  # rumor-run's RUMOR_SHARD=K/N: K (the data is cut in --peers shards)
        k = os.environ.get("RUMOR_SHARD", "1/1").split("/")[0]
        a.shard = int(k)
    if a.eval_every >= 0 and a.shard > a.eval_peers:
        a.eval_every = -1  # only peers 1..--eval-peers evaluate during training
    xtr, ytr, xte, yte = fashion_mnist(a.data)
    train_set_size = len(xtr)
    rows = torch.from_numpy(shard(len(xtr), a.shard, a.peers, a.seed))
    xtr, ytr = xtr[rows], ytr[rows]
    torch.manual_seed(a.seed)  # the same initial model on every peer (they start together)
    model = make_model(a.model)
    # The first evaluation (of the shared initial model) comes before joining, so the swarm
    # starts training together, as DDP's ranks wait for rank 0's first evaluation.
    first = evaluate(model, xte, yte) if a.eval_every >= 0 else None
    inner = torch.optim.Adam(model.parameters(), lr=a.lr)
    if a.plain:  # the same loop without Rumor (bench/torch_bench.py's overhead baseline)
        opt, peer = inner, None
        report = lambda acc, l, e: print(json.dumps({"event": "eval", "test_acc": acc, "loss": l, "epoch": e}))
    else:
        import rumor
        import rumor.torch
        # listen, join, name and metrics: rumor-run's (rumor.Peer reads them), unless given
        more = {} if a.min_peers is None else {"min_peers": a.min_peers}
        if a.outer_lr is not None:
            more["outer_lr"] = a.outer_lr
        if a.outer_momentum is not None:
            more["outer_momentum"] = a.outer_momentum
        peer = rumor.Peer(join=a.join, local_steps=a.local_steps, staleness=a.staleness, codec=a.codec,
                          mix_weight=a.mix_weight, metrics=a.metrics, name=a.name, log_level="info", **more)
        budget = {} if not a.swarm_epochs else {"swarm_epochs": a.swarm_epochs, "train_set_size": train_set_size}
        opt = rumor.torch.GossipOptimizer(inner, peer, model=model, samples_per_step=a.batch, **budget)
        report = opt.report
        print("listening on", peer.address, flush=True)
        opt.join(timeout=120)
    g = torch.Generator().manual_seed(a.seed * 1000 + a.shard)
    steps_per_epoch = math.ceil(len(xtr) / a.batch)
    total = a.steps or a.epochs * steps_per_epoch
    # A learning-rate schedule drives the inner optimizer, as in any torch loop: GossipOptimizer
    # steps it and reads its param_groups (torch's schedulers take only a torch.optim.Optimizer).
    swarm_budget = peer is not None and a.swarm_epochs > 0
    if swarm_budget:
        # A swarm-wide budget: train until the swarm as a whole has done --swarm-epochs passes
        # (fast peers do more steps), the schedule following the swarm's progress, not our steps.
        total = 1 << 62
        sched = swarm_lr_scheduler(inner, opt, a.lr_schedule, a.decay_fraction)
    else:
        sched = lr_scheduler(inner, a.lr_schedule, total, a.decay_fraction)
    every = a.eval_every or max(1, int(steps_per_epoch * a.eval_every_epochs))
    if first is not None:
        report(*first, 0.0)
    lossf = torch.nn.functional.cross_entropy
    train_s, step = 0.0, 0
    t_train = time.monotonic()
    while step < total:
        order = torch.randperm(len(xtr), generator=g)
        for b in range(steps_per_epoch):
            if step >= total or (swarm_budget and opt.done) or (a.duration and time.monotonic() - t_train >= a.duration):
                total = step
                break
            t0 = time.perf_counter()
            idx = order[b * a.batch:(b + 1) * a.batch]
            opt.zero_grad()
            loss = lossf(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step(loss=loss) if peer else opt.step()
            if sched:
                sched.step()
            train_s += time.perf_counter() - t0
            step += 1
            if a.eval_every >= 0 and step % every == 0 and step < total:
                report(*evaluate(model, xte, yte), step / steps_per_epoch)
    if peer:
        # Keep averaging a moment, and while another peer is still training (up to --settle-max),
        # so that the first to finish still takes in the others' last steps.
        opt.serve(a.settle, max_seconds=a.settle_max)
    acc, l = evaluate(model, xte, yte)
    report(acc, l, step / steps_per_epoch)
    rumor_s = opt.rumor_seconds if peer else 0.0
    print(f"final test_acc {acc:.4f} steps {step} train_s {train_s:.2f} "
          f"samples_per_s {step * a.batch / train_s:.1f} rumor_s {rumor_s:.3f}", flush=True)
    if peer:
        peer.close()
    return 0


def rumor_run(build):
    """The launcher: the build's (build/bin/rumor-run), else one on PATH (pip install ./python)."""
    import shutil
    here = os.path.join(build, "bin", "rumor-run")
    found = here if os.path.exists(here) else shutil.which("rumor-run")
    if not found:
        sys.exit(f"rumor-run not found ({here}, nor on PATH): build the rumor_python target, or pip install ./python")
    return found


def launch(a):
    import threading
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        if f.endswith((".jsonl", ".log")):
            os.remove(os.path.join(a.out, f))
    n_py = a.peers - a.mixed
    model = "mlp" if a.mixed else "cnn"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = rumor_run(a.build)
    steps_recipe = ["--batch", str(a.batch), "--lr", str(a.lr), "--lr-schedule", a.lr_schedule,
                    "--decay-fraction", str(a.decay_fraction), "--local-steps", str(a.local_steps), "--staleness",
                    str(a.staleness), "--codec", a.codec, "--mix-weight", a.mix_weight]
    recipe = ["--epochs", str(a.epochs), *steps_recipe]
    # rumor-peer stops at whichever of its stop rules comes first: under a swarm-wide budget it
    # must not also stop after --epochs of its own shard (the Python workers read --epochs only
    # without a budget), or the fast native peers stop early and wait for the Python ones.
    native_recipe = steps_recipe if a.swarm_epochs else recipe
    limits = ["--timeout", str(a.timeout), "--grace", "10"]
    # The Python peers: one rumor-run, --nproc of them, shards 1..n_py of --peers, every one
    # waiting for all --peers (rumor-peer ones included) before training.
    cmd = [run, "--nproc", str(n_py), "--metrics-dir", a.out, *limits, "--", os.path.abspath(__file__), "--worker",
           "--peers", str(a.peers), "--model", model, *recipe, "--min-peers", str(a.peers), "--data", a.data,
           "--seed", str(a.seed), "--settle", str(a.settle), "--settle-max", str(a.settle_max),
           "--eval-every-epochs", str(a.eval_every_epochs), "--eval-every", str(a.eval_every),
           "--eval-peers", str(a.eval_peers), "--steps", str(a.steps), "--swarm-epochs", str(a.swarm_epochs)] \
        + (["--plain"] if a.plain else [])
    print(f"== {n_py} Python peer(s) ({'the mlp:256,128 equivalent' if a.mixed else 'a 2-conv CNN'})"
          + (f" and {a.mixed} rumor-peer peer(s)" if a.mixed else "") + f" on 127.0.0.1; logs in {a.out}", flush=True)
    py = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True)
    procs, out_lines, founders = [py], [], []
    started = threading.Event()

    def copy_stderr(stream, log):  # rumor-run's lines and every peer's log, "[pK] "-prefixed
        with open(log, "w") as f:
            for line in stream:
                f.write(line)
                f.flush()
                m = re.match(r"rumor-run: started .* listening on (\S+);", line)
                if m and not started.is_set():
                    founders.extend(m.group(1).split(",")[:2])  # the swarm's founders (one: a swarm of one)
                    started.set()
        started.set()

    threads = [threading.Thread(target=copy_stderr, args=(py.stderr, os.path.join(a.out, "python-peers.log")),
                                daemon=True),
               threading.Thread(target=lambda: out_lines.extend(py.stdout), daemon=True)]
    for t in threads:
        t.start()
    rc = 0
    try:
        started.wait(60)
        if a.mixed:
            if not founders:
                sys.exit(open(os.path.join(a.out, "python-peers.log")).read()[-3000:] + "\nthe Python peers did not start")
            print(f"   the Python peers' founders: {', '.join(founders)}", flush=True)
            binary = os.path.join(a.build, "peer", "rumor-peer")
            for k in range(n_py + 1, a.peers + 1):
                procs.append(subprocess.Popen(
                    [run, "--join", ",".join(founders), *limits, "--", binary, "--listen", "127.0.0.1:0",
                     "--shard", f"{k}/{a.peers}", "--model", "mlp:256,128", *native_recipe, "--min-peers", str(a.peers),
                     "--name", f"c{k}", "--metrics", os.path.join(a.out, f"c{k}.jsonl"), "--data", a.data]
                    + (["--steps", str(a.steps)] if a.steps else [])
                    + (["--swarm-epochs", str(a.swarm_epochs)] if a.swarm_epochs else []),
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(a.out, f"c{k}.log"), "w"), env=env,
                    start_new_session=True))
        t0 = time.monotonic()
        try:
            for p in procs:  # each rumor-run ends by --timeout at the latest
                rc |= p.wait(max(1.0, a.timeout + 30 - (time.monotonic() - t0))) != 0
        except subprocess.TimeoutExpired:
            rc = 1
            print(f"timed out after {a.timeout} s", file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for t in threads:
            t.join(5)
    if rc:
        sys.exit(f"a peer failed; see {a.out}/*.log")
    summary = {}
    for line in out_lines:
        m = re.match(r"\[p(\d+)\] final (.*)$", line)
        if m:
            f = m.group(2).split()
            summary[f"p{m.group(1)}"] = {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}
    summary = dict(sorted(summary.items(), key=lambda kv: int(kv[0][1:])))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if a.plain:
        print(json.dumps(summary))
        return 0
    files = sorted(os.path.join(a.out, f) for f in os.listdir(a.out) if f.endswith(".jsonl"))
    subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--png", os.path.join(a.out, "accuracy.png"),
                    "--title", "Rumor + PyTorch: test accuracy of every peer"] + files, check=True)


def local_steps_arg(text):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of steps >= 1, or auto") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of steps >= 1, or auto")
    return value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "torch_quickstart"))
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--mixed", type=int, default=0, help="how many of the peers are C++ rumor-peer processes")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--swarm-epochs", type=float, default=None,
                    help="a swarm-wide budget instead of --epochs per peer: every peer stops when the swarm as a "
                         "whole has done this many passes over the training set, and the schedule follows the "
                         "swarm's progress (0: off). Default: off, except with --mixed, where it is --epochs: "
                         "the same samples in all as --epochs per peer, but shared by speed, so that the "
                         "rumor-peer processes (tens of times faster than the Python peers) train until the "
                         "swarm is done instead of finishing first and waiting")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=RECIPE["lr"], help="Adam's learning rate")
    ap.add_argument("--lr-schedule", choices=SCHEDULES, default=RECIPE["lr_schedule"],
                    help="constant; cosine: from --lr down to 0 over each peer's steps; wsd: --lr held, then "
                         "decayed linearly to 0 over the last --decay-fraction of them (the same schedule in "
                         "rumor-peer for --mixed peers)")
    ap.add_argument("--decay-fraction", type=float, default=RECIPE["decay_fraction"],
                    help="wsd: the part of the steps over which the rate decays to 0")
    ap.add_argument("--local-steps", type=local_steps_arg, default="auto",
                    help="optimizer steps between exchanges, or auto: the peer chooses from its step time "
                         "and its exchanges' round trips (rumor-peer --local-steps)")
    ap.add_argument("--staleness", default="inf")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--outer-lr", type=float, default=None,
                    help="outer learning rate of each mix (gossip-DiLoCo; rumor.Peer outer_lr; default 1: plain gossip)")
    ap.add_argument("--outer-momentum", type=float, default=None,
                    help="outer momentum (rumor.Peer outer_momentum; DiLoCo uses 0.9 with --outer-lr 0.7)")
    ap.add_argument("--mix-weight", choices=("uniform", "samples"), default="samples",
                    help="averaging weights: by the samples each peer has trained on (a peer that fell behind, "
                         "e.g. the one that evaluates, takes more of the others' models than they take of its own), "
                         "or uniform")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--settle-max", type=float, default=60.0)
    ap.add_argument("--eval-every-epochs", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-peers", type=int, default=1 << 30,
                    help="only peers 1..N evaluate during training (all evaluate at the end); default: all")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--timeout", type=float, default=3600)
    # worker mode (one peer; started by the launcher)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=None, help=argparse.SUPPRESS)  # default: RUMOR_SHARD
    ap.add_argument("--model", default="cnn", help=argparse.SUPPRESS)
    ap.add_argument("--join", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--metrics", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--name", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--min-peers", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plain", action="store_true", help="the same loops without Rumor (overhead baseline)")
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--eval-every", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, default=0, help=argparse.SUPPRESS)  # worker: seconds of training
    a = ap.parse_args(argv)
    a.staleness = float(a.staleness)
    if not 0.0 <= a.decay_fraction <= 1.0:
        ap.error(f"--decay-fraction {a.decay_fraction}: expected a number in [0, 1]")
    if a.mixed < 0 or a.mixed >= a.peers:
        ap.error("--mixed must leave at least one Python peer")
    if a.swarm_epochs is None:
        a.swarm_epochs = float(a.epochs) if a.mixed and not a.worker and not a.steps and not a.duration else 0.0
    return worker(a) if a.worker else launch(a)


if __name__ == "__main__":
    sys.exit(main())
