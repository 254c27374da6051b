#!/usr/bin/python3
"""Calibrate rumor-sim for Rumor's Python peers (bench/testbed_race.sh --python; docs/testbed.md).

rumor-sim --calibrate measures rumor-peer (its C++ step). A Python peer of examples/
torch_quickstart.py spends its CPU elsewhere: importing torch and loading the data set, torch's
forward and backward and Adam, torch's evaluation. This measures those as CPU seconds of one
whole core and writes them as a [compute] fragment (a testbed class's `cpu` divides them, and
rumor-sim runs a capped peer in CFS windows, as with rumor-peer's figures):

  start       the CPU a fresh interpreter spends until the data is loaded and the model built
              (import torch, numpy and rumor; read Fashion-MNIST; cut the shard);
  step_time   one training step of GossipOptimizer in a swarm of one (torch's step and Rumor's
              per-step work; the exchanges' CPU is rumor-peer's exchange_cpu, the same C++
              code): the median over --steps steps of the thread's CPU time, and `sd` the spread
              of their logarithms (dist = lognormal);
  eval_time   one evaluation on the 10,000 test images (examples/torch_quickstart.py evaluate).

and a [workload] `init = torch`: the torch model starts from PyTorch's default initialisation,
not rumor-peer's He-normal, and its first epoch's curve shows it (docs/testbed.md, "The
initialisation").

Measured as the testbed runs them: --procs processes at once (default 4), each in a cgroup v1
`cpu` group capped at --cpu of a core (default 0.3, the testbed's base.ini; 0: uncapped). CPU
time, not wall time, so the caps' waits are left to rumor-sim's model, while what running
beside the others costs (a shared core's caches and, on a machine whose cores are hyperthreads,
the sibling's work) is in the figures. Medians over the processes. Needs root for the caps.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_calibrate.py --model mlp --out F.ini
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "testbed"))
import testbed as T  # noqa: E402  (its cgroup helpers)


def child(a):
    """One measuring process: prints one JSON line of CPU seconds."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np  # noqa: F401
    import torch
    import rumor
    import rumor.torch
    import torch_quickstart as q
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = q.fashion_mnist(a.data)
    rows = torch.from_numpy(q.shard(len(xtr), 1, 4, 1))
    xtr, ytr = xtr[rows], ytr[rows]
    torch.manual_seed(1)
    model = q.make_model(a.model)
    start_cpu = time.process_time()  # the interpreter's start-up, imports and loading
    inner = torch.optim.Adam(model.parameters(), lr=1e-3)
    peer = rumor.Peer(listen="127.0.0.1:0", join="", min_peers=1, metrics=None)
    opt = rumor.torch.GossipOptimizer(inner, peer, model=model, samples_per_step=a.batch)
    opt.join(timeout=60)
    order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(1))
    per_epoch = len(xtr) // a.batch
    steps = []
    for k in range(10 + a.steps):
        b = k % per_epoch
        t0 = time.thread_time()
        idx = order[b * a.batch:(b + 1) * a.batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step(loss=loss)
        if k >= 10:
            steps.append(time.thread_time() - t0)
    peer.close(settle=False)
    t0 = time.thread_time()
    q.evaluate(model, xte, yte)
    ev = time.thread_time() - t0
    print(json.dumps({"start": start_cpu, "steps": steps, "eval": ev}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                    help="mlp: the torch equivalent of mlp:256,128; cnn: the torch quickstart's CNN")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--steps", type=int, default=200, help="training steps timed per process (after 10 of warm-up)")
    ap.add_argument("--procs", type=int, default=4, help="processes measured at once (default 4, as the testbed)")
    ap.add_argument("--cpu", type=float, default=0.3,
                    help="each process's cgroup cap, in cores (default 0.3, the testbed's; 0: uncapped)")
    ap.add_argument("--period-us", type=int, default=100000, help="the caps' cfs_period_us (default 100000)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", help="the [compute] fragment to write")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not a.out:
        ap.error("--out is required")
    if a.procs < 1:
        ap.error("--procs must be at least 1")
    group = None
    if a.cpu > 0:
        if os.geteuid() != 0 or not os.path.isfile(os.path.join(T.CGROUP_CPU, "cpu.cfs_quota_us")):
            sys.exit(f"torch_calibrate: --cpu {a.cpu} needs root and the cgroup v1 cpu controller at {T.CGROUP_CPU} "
                     "(or --cpu 0: uncapped)")
        group = os.path.join(T.CGROUP_CPU, f"rtb-cal-{os.getpid()}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    argv = ["/usr/bin/python3", os.path.abspath(__file__), "--child", "--model", a.model, "--data", a.data,
            "--steps", str(a.steps), "--batch", str(a.batch)]
    procs, groups = [], []
    try:
        for k in range(a.procs):
            enter = None
            if group:
                g = os.path.join(group, f"p{k}")
                T.make_cpu_group(g, a.cpu, a.period_us)
                groups.append(g)
                enter = T.joiner(g)
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=enter))
        results = []
        for p in procs:
            out, _ = p.communicate()
            if p.returncode != 0 or not out.strip():
                sys.exit(f"torch_calibrate: a measuring process failed (exit {p.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        T.remove_groups(groups + ([group] if group else []))
    step = statistics.median(statistics.median(r["steps"]) for r in results)
    sd = statistics.median(statistics.pstdev([math.log(max(t, 1e-9)) for t in r["steps"]]) for r in results)
    ev = statistics.median(r["eval"] for r in results)
    start = statistics.median(r["start"] for r in results)
    how = f"{a.procs} at once, each capped at {a.cpu:g} of a core" if a.cpu > 0 else f"{a.procs} at once, uncapped"
    print(f"torch_calibrate: {a.model} ({how}): step {step * 1e3:.2f} ms of CPU (sd of log {sd:.3f}), evaluation "
          f"{ev:.3f} s, start-up {start:.2f} s", file=sys.stderr)
    import torch
    with open(a.out, "w") as f:
        f.write(f"# Rumor's Python peers ({a.model}, torch {torch.__version__}): CPU seconds of one core, measured with\n"
                f"# {how} (bench/torch_calibrate.py); a testbed class's cpu divides these.\n"
                f"[compute]\nstep_time = {step:.6f}\ndist = lognormal\nsd = {sd:.4f}\neval_time = {ev:.6f}\n"
                f"start = {start:.3f}\n"
                f"# torch's nn.Linear / nn.Conv2d start: uniform in +-1/sqrt(fan-in) (core/model.hpp InitScheme)\n"
                f"[workload]\ninit = torch\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
