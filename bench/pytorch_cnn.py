#!/usr/bin/python3
"""PyTorch reference for Rumor's convolutional models (bench/cnn_bench.sh; run with Debian's
/usr/bin/python3 and python3-torch).

Builds the network a Rumor `cnn:` spec describes (the same grammar: cNkK[sS][pP] Conv2d + ReLU,
pK MaxPool2d(K), fN Linear + ReLU, then Linear to the 10 classes), Adam, cross-entropy, on the
real Fashion-MNIST (pixels / 255) read from the same gzip IDX files, one thread by default.
Data loading and the timing loop are bench/pytorch_mlp.py's (same batch draw, same warm-up and
repetitions), so the two references measure the same way.

Default mode (throughput) prints every repetition and then
    pytorch_samples_per_s <median>
    pytorch_cpu_samples_per_s <median>
--epochs N trains N epochs and prints the test accuracy after each, then pytorch_test_acc.
"""
import argparse
import os
import re
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_mlp  # noqa: E402  (load(), accuracy(), throughput(), epochs())


def make_cnn(spec, side=28, channels=1, classes=10):
    if not spec.startswith("cnn:"):
        raise ValueError(f"not a cnn spec: {spec}")
    # NCHW, PyTorch's native layout (for one channel the same memory as Rumor's NHWC rows).
    layers, h, w, c, flat = [nn.Unflatten(1, (channels, side, side))], side, side, channels, None
    for tok in spec[4:].split(","):
        m = re.fullmatch(r"c(\d+)k(\d+)(?:s(\d+))?(?:p(\d+))?", tok)
        if m:
            n, k, s, p = int(m[1]), int(m[2]), int(m[3] or 1), int(m[4] or 0)
            layers += [nn.Conv2d(c, n, k, stride=s, padding=p), nn.ReLU()]
            h, w, c = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, n
            continue
        m = re.fullmatch(r"p(\d+)", tok)
        if m:
            k = int(m[1])
            layers.append(nn.MaxPool2d(k))
            h, w = h // k, w // k
            continue
        m = re.fullmatch(r"f(\d+)", tok)
        if m:
            if flat is None:
                layers.append(nn.Flatten())
                flat = h * w * c
            layers += [nn.Linear(flat, int(m[1])), nn.ReLU()]
            flat = int(m[1])
            continue
        raise ValueError(f"token '{tok}' is not cNkK[sS][pP], pK or fN")
    if flat is None:
        layers.append(nn.Flatten())
        flat = h * w * c
    layers.append(nn.Linear(flat, classes))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="cnn:c32k5,p2,c64k5,p2,f1024")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    pytorch_mlp.make_model = lambda: make_cnn(args.model)  # the loops below build this model
    t = time.perf_counter()
    xtr, ytr, xte, yte = pytorch_mlp.load(args.data)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), mkldnn "
          f"{torch.backends.mkldnn.is_available()}; data {args.data}: {len(xtr)} train / {len(xte)} "
          f"test rows, loaded in {time.perf_counter() - t:.2f} s", flush=True)
    model = make_cnn(args.model)
    print(f"# {args.model}: {sum(p.numel() for p in model.parameters())} parameters; Adam lr {args.lr}, "
          f"batch {args.batch}", flush=True)
    if args.epochs > 0:
        pytorch_mlp.epochs(args, xtr, ytr, xte, yte)
    else:
        print(f"# {args.reps} repetitions x {args.steps} timed steps (after {args.warmup} warm-up steps each)",
              flush=True)
        pytorch_mlp.throughput(args, xtr, ytr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
