#!/usr/bin/python3
"""One torch DDP rank of the testbed race (examples/testbed/run.sh --peer-cmd ddp starts one per
network namespace; docs/testbed.md). gloo over the namespace's eth0, one thread.

The model and recipe are the scenario's (rumor-peer's flags, as `rumor-sim --peer-flags` gives
them): mlp:W,... as torch layers (or, with --torch-model cnn, the torch quickstart's CNN: the
model the Python peers of `run.sh --peer-cmd python --torch-model cnn` train), Adam, --lr,
--lr-schedule (constant, cosine or wsd, as examples/torch_quickstart.py), --batch, --epochs, the rank's shard of the
training set (K/N: the same rows per rank count as the Rumor peer's shard; DistributedSampler,
reshuffled every epoch), an evaluation on the test set by rank 0 every --eval-every steps and at
the start and the end, and by every rank at the end (its own model: post-local SGD's ranks
differ between averagings).

Forms (--ddp):
  plain      DDP's gradient all-reduce every step;
  powersgd   DDP with the PowerSGD communication hook (rank 1, after 10 plain steps);
  postlocal  post-local SGD: the post_localSGD hook (all-reduce until step 100, then none) and
             PostLocalSGDOptimizer with PeriodicModelAverager, period 8.

Writes rumor-peer's metrics lines (docs/metrics.md: eval and done events with t, step,
test_acc, bytes_sent, samples_per_s) to --metrics, so the testbed's summary reads both alike.
bytes_sent is what the process wrote to its sockets and files (/proc/self/io wchar delta).
"""
import argparse
import json
import math
import os
import sys
import time

T_START = time.time()
T_START_MONO = time.monotonic()

import numpy as np  # noqa: E402


# Fashion-MNIST as examples/torch_quickstart.py reads it (numpy only at import).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from torch_quickstart import load, lr_scheduler, make_model, SCHEDULES  # noqa: E402


def wchar():
    try:
        for line in open("/proc/self/io"):
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ddp", choices=("plain", "powersgd", "postlocal"), default="plain")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="ADDR:PORT of rank 0's rendezvous")
    ap.add_argument("--ifname", default="eth0")
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--period", type=int, default=8, help="postlocal: averaging period")
    # The scenario's flags (rumor-peer's names); the ones a DDP rank has no use for are accepted.
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", default="mlp:256,128")
    ap.add_argument("--torch-model", choices=("scenario", "mlp", "cnn"), default="scenario",
                    help="cnn: the torch quickstart's CNN instead of the scenario's MLP")
    ap.add_argument("--lr-schedule", choices=SCHEDULES, default="constant")
    ap.add_argument("--decay-fraction", type=float, default=0.3)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args, _ignored = ap.parse_known_args()
    cnn = args.torch_model == "cnn"
    if (not cnn and not args.model.startswith("mlp:")) or args.optimizer != "adam":
        sys.exit(f"testbed_ddp: only mlp:W,... (or --torch-model cnn) with adam is built (got {args.model}, "
                 f"{args.optimizer})")
    os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)

    metrics = open(args.metrics, "w", buffering=1)

    def emit(**kv):
        kv = {"t": round(time.monotonic() - T_START_MONO, 4), **kv}
        metrics.write(json.dumps(kv) + "\n")

    # as rumor-peer's first line: where this file's clock starts, on the wall clock
    emit(event="start", t=0.0, peer=f"rank{args.rank}", unix_time=T_START, t_offset=0.0, device="cpu")

    shape = (-1, 1, 28, 28) if cnn else (-1, 784)
    xtr = torch.from_numpy(load(args.data, "train-images-idx3-ubyte").reshape(shape).astype(np.float32) / 255.0)
    ytr = torch.from_numpy(load(args.data, "train-labels-idx1-ubyte").astype(np.int64))
    xte = torch.from_numpy(load(args.data, "t10k-images-idx3-ubyte").reshape(shape).astype(np.float32) / 255.0)
    yte = torch.from_numpy(load(args.data, "t10k-labels-idx1-ubyte").astype(np.int64))

    host, port = args.master.rsplit(":", 1)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=args.rank, world_size=args.world)
    torch.manual_seed(args.seed)
    if args.torch_model != "scenario":  # the Python peers' own model (examples/torch_quickstart.py)
        model = DDP(make_model(args.torch_model))
    else:
        widths = [int(w) for w in args.model[4:].split(",")]
        layers, prev = [], 784
        for w in widths:
            layers += [nn.Linear(prev, w), nn.ReLU()]
            prev = w
        layers.append(nn.Linear(prev, 10))
        model = DDP(nn.Sequential(*layers))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    if args.ddp == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
        state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=10)
        model.register_comm_hook(state, powerSGD.powerSGD_hook)
    elif args.ddp == "postlocal":
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (PostLocalSGDState,
                                                                                    post_localSGD_hook)
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer
        # After step 100 each rank's gradient stays its own: the subgroup is the rank alone (torch's
        # default, one subgroup per machine, needs CUDA to count the machine's devices).
        alone = [dist.new_group([r]) for r in range(args.world)][args.rank]
        model.register_comm_hook(PostLocalSGDState(process_group=None, subgroup=alone, start_localSGD_iter=100),
                                 post_localSGD_hook)
        opt = PostLocalSGDOptimizer(optim=opt, averager=PeriodicModelAverager(period=args.period, warmup_steps=100))
    loss_fn = nn.CrossEntropyLoss()

    def accuracy():
        model.eval()
        with torch.no_grad():
            correct = sum(int((model.module(xte[i:i + 2000]).argmax(1) == yte[i:i + 2000]).sum())
                          for i in range(0, len(xte), 2000))
        model.train()
        return correct / len(xte)

    n = len(xtr)
    per_rank = n // args.world
    steps_per_epoch = math.ceil(per_rank / args.batch)
    total = int(math.ceil(args.epochs * steps_per_epoch))
    eval_every = args.eval_every or steps_per_epoch
    # the schedule drives the inner optimizer (PostLocalSGDOptimizer wraps it)
    sched = lr_scheduler(opt.optim if args.ddp == "postlocal" else opt, args.lr_schedule, total, args.decay_fraction)
    g = torch.Generator().manual_seed(args.seed)
    w0 = wchar()
    step, epoch = 0, 0
    t_train = time.time()
    if args.rank == 0:
        emit(event="eval", step=0, epoch=0.0, test_acc=accuracy(), bytes_sent=0)
    while step < total:
        perm = torch.randperm(n, generator=g)[args.rank * per_rank:(args.rank + 1) * per_rank]
        for b in range(0, per_rank, args.batch):
            if step >= total:
                break
            bi = perm[b:b + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xtr[bi]), ytr[bi])
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            step += 1
            if args.rank == 0 and step % eval_every == 0 and step < total:
                emit(event="eval", step=step, epoch=step / steps_per_epoch, test_acc=accuracy(),
                     bytes_sent=wchar() - w0)
        epoch += 1
    train_s = time.time() - t_train
    acc = accuracy()
    sent = wchar() - w0
    emit(event="eval", step=step, epoch=step / steps_per_epoch, test_acc=acc, bytes_sent=sent)
    emit(event="done", steps=step, test_acc=acc, bytes_sent=sent, bytes_recv=None,
         samples_per_s=step * args.batch / train_s if train_s > 0 else None)
    dist.barrier()
    metrics.close()
    # gloo's teardown has been seen spinning for ever after the others left (bench/ddp_fmnist.py):
    # everything is measured and written, so leave without it.
    os._exit(0)


if __name__ == "__main__":
    main()
