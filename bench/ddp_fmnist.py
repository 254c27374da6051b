#!/usr/bin/python3
"""PyTorch DDP reference for bench/gossip_bench.sh (run with Debian's /usr/bin/python3 and
python3-torch).

torch.distributed with the gloo backend on 127.0.0.1, --world processes (default 4, started
with torch.multiprocessing.spawn), each with torch.set_num_threads(1). The same model as
Rumor's default (Linear 784-256, ReLU, Linear 256-128, ReLU, Linear 128-10, cross-entropy),
Adam lr 1e-3, batch 64 per process, the training set split by DistributedSampler (shuffled,
reshuffled every epoch with set_epoch), Fashion-MNIST read from the gzip IDX files (pixels /
255). Each batch is gathered from the in-memory tensor (no DataLoader, like bench/pytorch_mlp.py).

Rank 0 evaluates its model (identical on every rank) on the whole test set before training and
every --eval-every steps. The other ranks wait for it at the next all-reduce, exactly as they
would in a real run; that time is reported both ways:
  wall:  seconds since training started, at the end of the evaluation (what Rumor's metrics
         `t` measures: each Rumor peer also evaluates every --eval-every steps);
  train: the same minus the time spent evaluating (the training alone).

Output: one progress line per evaluation, then machine-readable lines:
    ddp_time_to_target_s <wall seconds at the first eval with test_acc >= --target, or nan>
    ddp_time_to_target_train_s <the same without the evaluations>
    ddp_step_at_target <step>
    ddp_final_acc <test accuracy after --epochs epochs>
    ddp_wall_s / ddp_train_s <whole run, with / without evaluations>
    ddp_mb_sent_per_process <bytes each rank wrote to its sockets (/proc/self/io wchar delta), MB>
    ddp_mb_allreduce_estimate <2 (W-1)/W x gradient bytes x steps, MB: the ring all-reduce volume>
    ddp_blas <the BLAS libraries torch mapped>
"""
import argparse
import gzip
import math
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: size does not match the dimensions {dims}")
    return arr.reshape(dims)


def find(directory, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{directory}: no {stem}[.gz]")


def load(directory, test):
    def images(stem):
        a = read_idx(find(directory, stem))
        return torch.from_numpy(a.reshape(a.shape[0], -1).astype(np.float32) / 255.0)

    def labels(stem):
        return torch.from_numpy(read_idx(find(directory, stem)).astype(np.int64))

    xtr, ytr = images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte")
    if not test:
        return xtr, ytr, None, None
    return xtr, ytr, images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte")


def quickstart():
    """examples/torch_quickstart.py as a module: its CNN and its learning-rate schedules."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import torch_quickstart
    return torch_quickstart


def make_model(kind="mlp"):
    if kind == "cnn":  # examples/torch_quickstart.py's CNN (bench/torch_bench.py compares with it)
        return quickstart().make_model("cnn")
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1024]).argmax(1) == y[i:i + 1024]).sum())
                      for i in range(0, len(x), 1024))
    model.train()
    return correct / len(x)


def wchar():
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def blas():
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({l.split()[-1] for l in f if "libblas" in l or "libopenblas" in l})
        return " ".join(os.path.realpath(p) for p in paths) or "none"
    except OSError:
        return "unknown"


def worker(rank, args, port, results):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.world)
    xtr, ytr, xte, yte = load(args.data, test=(rank == 0))
    torch.manual_seed(args.seed)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = DDP(make_model(args.model))
    if args.model == "cnn":  # images as 1 x 28 x 28
        xtr = xtr.view(-1, 1, 28, 28)
        xte = xte.view(-1, 1, 28, 28) if xte is not None else None
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(torch.utils.data.TensorDataset(xtr, ytr), num_replicas=args.world,
                                 rank=rank, shuffle=True, seed=args.seed)
    steps_per_epoch = math.ceil(len(sampler) / args.batch)
    total_steps = int(math.ceil(args.epochs * steps_per_epoch))
    sched = quickstart().lr_scheduler(opt, args.lr_schedule, total_steps, args.decay_fraction)
    nparams = sum(p.numel() for p in model.parameters())

    evals = []  # (step, wall_s, train_s, acc)
    eval_total = 0.0
    if rank == 0:
        acc0 = accuracy(model.module, xte, yte)
        print(f"ddp: {args.world} processes (gloo, 127.0.0.1), {nparams} parameters, batch "
              f"{args.batch} per process, {steps_per_epoch} steps per epoch, {total_steps} steps; "
              f"blas: {blas()}", flush=True)
        print(f"ddp: step 0 test_acc {acc0:.4f}", flush=True)
        evals.append((0, 0.0, 0.0, acc0))
    dist.barrier()
    w0 = wchar()
    t0 = time.perf_counter()
    step = 0
    epoch = 0
    reached = None
    while step < total_steps:
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        for b in range(0, len(idx), args.batch):
            if step >= total_steps:
                break
            bi = idx[b:b + args.batch]
            xb, yb = xtr[bi], ytr[bi]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()  # the all-reduce of the gradient happens here
            opt.step()
            if sched:
                sched.step()
            step += 1
            last = step == total_steps
            if rank == 0 and (step % args.eval_every == 0 or last):
                te0 = time.perf_counter()
                acc = accuracy(model.module, xte, yte)
                te1 = time.perf_counter()
                eval_total += te1 - te0
                wall = te1 - t0
                train = wall - eval_total
                evals.append((step, wall, train, acc))
                if reached is None and acc >= args.target:
                    reached = (step, wall, train)
                print(f"ddp: epoch {step / steps_per_epoch:.2f} step {step} t {wall:.2f} s "
                      f"(train {train:.2f} s) test_acc {acc:.4f}", flush=True)
        epoch += 1
    dist.barrier()
    t_end = time.perf_counter() - t0
    w1 = wchar()
    sent = (w1 - w0) if (w0 is not None and w1 is not None) else None
    sent_all = [None] * args.world
    dist.all_gather_object(sent_all, sent)
    if rank == 0:
        final = evals[-1][3]
        mb = [s / 1e6 for s in sent_all if s is not None]
        est = 2 * (args.world - 1) / args.world * nparams * 4 * total_steps / 1e6
        out = {
            "ddp_time_to_target_s": reached[1] if reached else float("nan"),
            "ddp_time_to_target_train_s": reached[2] if reached else float("nan"),
            "ddp_step_at_target": reached[0] if reached else float("nan"),
            "ddp_final_acc": final,
            "ddp_wall_s": t_end,
            "ddp_train_s": t_end - eval_total,
            "ddp_steps": total_steps,
            "ddp_mb_sent_per_process": (sorted(mb)[len(mb) // 2] if mb else float("nan")),
            "ddp_mb_allreduce_estimate": est,
        }
        results.put((out, blas()))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-schedule", choices=("constant", "cosine", "wsd"), default="constant",
                    help="cosine: from --lr down to 0 over the run's steps; wsd: --lr held, then decayed "
                         "linearly to 0 over the last --decay-fraction of the steps (examples/torch_quickstart.py's)")
    ap.add_argument("--decay-fraction", type=float, default=0.3, help="wsd: the part of the steps that decays")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                    help="mlp: Rumor's default MLP; cnn: examples/torch_quickstart.py's CNN")
    args = ap.parse_args()
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    # (The context must stay referenced: it holds the queues the ranks unpickle at start.)
    spawned = mp.spawn(worker, args=(args, free_port(), results), nprocs=args.world, join=False)
    procs = spawned.processes
    # Rank 0 hands over its figures after the last barrier. A rank that dies first ends the
    # run with its exit code; a rank that is still in gloo's teardown 30 s after the figures
    # came (seen here: one rank spinning in a socket loop for ever after the others exited)
    # is terminated, since everything measured is in: mp.spawn(join=True) would wait for it.
    while results.empty():
        dead = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead:
            for p in procs:
                p.terminate()
            sys.exit(f"ddp: rank {dead[0][0]} exited with code {dead[0][1]} before the run ended")
        time.sleep(0.2)
    out, lib = results.get()
    deadline = time.monotonic() + 30
    for i, p in enumerate(procs):
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            print(f"ddp: rank {i} still in teardown 30 s after the run ended: terminated", file=sys.stderr, flush=True)
            p.terminate()
            p.join(5)
    for k, v in out.items():
        print(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}")
    print(f"ddp_blas {lib}")


if __name__ == "__main__":
    sys.exit(main())
