#!/usr/bin/python3
"""The network testbed: real peers in network namespaces on one bridge, with htb-shaped links
and cgroup CPU caps, built from a rumor-sim scenario file (docs/testbed.md).

One scenario, two worlds: `rumor-sim SCENARIO --testbed-plan` reads the file (the simulator's
own parser) and prints every founder's class, bandwidth, CPU share, bandwidth changes and
rumor-peer flags; this program builds that network and runs those peers, and `rumor-sim` on the
same file predicts the run. Nothing here parses the INI file. What runs in each namespace:
rumor-peer (`--peer-cmd native`), a Rumor Python peer (`python`: examples/torch_quickstart.py
--worker with the scenario's recipe, flag by flag) or a torch DDP rank (`ddp`:
bench/testbed_ddp.py); `--torch-model cnn` makes both torch sides train the torch quickstart's CNN.

The network: one private /24 (default 10.213.7.0/24) that exists only inside the namespaces made
here. A bridge `br0` lives in its own namespace (PREFIX-br), so nothing is added to the host's
root namespace; peer k has a namespace PREFIX-pK with `eth0` = 10.213.7.(10+K)/24, the other end
of its veth (`pK`) on the bridge. Each link is shaped both ways to the class bandwidth with htb:
egress of the peer's eth0 (what it sends) and egress of the bridge-side pK (what it receives).
Each peer runs in a cgroup v1 `cpu` group PREFIX/pK with cfs_quota = share x period.

Tear-down always runs (finally, SIGINT and SIGTERM handlers), is idempotent and removes every
namespace, veth, bridge and cgroup of the prefix; `--cleanup PREFIX` removes what a run killed
with SIGKILL left. PREFIX is `rtb-<pid>` unless given.

This file is also the library of the tests (tests/testbed/) and of bench/testbed_race.sh.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

CGROUP_CPU = "/sys/fs/cgroup/cpu"
SKIP = 77  # what the tests' SKIP_RETURN_CODE expects


class Refused(Exception):
    """The machine cannot host a testbed (not root, no namespaces, no htb, no cgroup cpu)."""


def sh(*args, check=True, quiet=False):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def tc_rate(bytes_per_s):
    """htb's rate in bit/s (tc takes `bit` for bits per second)."""
    return f"{int(round(bytes_per_s * 8))}bit"


def tc_burst(bytes_per_s):
    # 5 ms of the rate, at least 64 KiB: veth hands htb GSO packets of up to 64 KiB, and a
    # burst below one packet would hold the rate under the set one.
    return str(max(65536, int(bytes_per_s * 0.005)))


class Testbed:
    """A bridge namespace and peer namespaces under one name prefix. Use as a context manager:
    leaving it (normally or by an exception) tears everything down."""

    def __init__(self, prefix=None, subnet="10.213.7", period_us=100000):
        self.prefix = prefix or f"rtb-{os.getpid()}"
        self.subnet = subnet
        self.period_us = period_us
        self.br = f"{self.prefix}-br"
        self.peers = []  # indices made
        self.procs = []  # Popen of everything started in the namespaces
        self._lock = threading.Lock()

    # ---- checks ----
    @staticmethod
    def refusal():
        """Why this machine cannot host a testbed, or None."""
        if os.geteuid() != 0:
            return "not root: network namespaces, tc and cgroups need root"
        for tool in ("ip", "tc", "nsenter"):
            if not shutil.which(tool):
                return f"{tool} not found"
        if not os.path.isfile(os.path.join(CGROUP_CPU, "cpu.cfs_quota_us")):
            return f"no cgroup v1 cpu controller at {CGROUP_CPU} (cpu.cfs_quota_us)"
        probe = f"rtb-probe-{os.getpid()}"
        r = sh("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"cannot make a network namespace: {r.stderr.strip()}"
        try:
            r = sh("ip", "-n", probe, "link", "add", "b0", "type", "bridge", check=False)
            if r.returncode != 0:
                return f"cannot make a bridge in a namespace: {r.stderr.strip()}"
            r = sh("tc", "-n", probe, "qdisc", "add", "dev", "b0", "root", "handle", "1:", "htb", check=False)
            if r.returncode != 0:
                return f"tc cannot add an htb qdisc: {r.stderr.strip()}"
        finally:
            sh("ip", "netns", "del", probe, check=False)
        return None

    def addr(self, k):
        return f"{self.subnet}.{10 + k}"

    def ns(self, k):
        return f"{self.prefix}-p{k}"

    def cgroup(self, k):
        return os.path.join(CGROUP_CPU, self.prefix, f"p{k}")

    # ---- building ----
    def __enter__(self):
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def stop(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        for s in self._old:
            signal.signal(s, stop)
        try:
            sh("ip", "netns", "add", self.br)
            sh("ip", "-n", self.br, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.br, "link", "set", "br0", "up")
            os.makedirs(os.path.join(CGROUP_CPU, self.prefix), exist_ok=True)
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()
        for s, h in self._old.items():
            signal.signal(s, h)
        return False

    def add_peer(self, k, bandwidth, cpu, period_us=None):
        """Namespace, veth to the bridge, htb both ways at `bandwidth` bytes/s, a cgroup with
        `cpu` cores (0 or None: uncapped) as a quota in every `period_us` (default: the
        testbed's)."""
        period_us = int(period_us or self.period_us)
        ns = self.ns(k)
        sh("ip", "netns", "add", ns)
        self.peers.append(k)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.br, "link", "add", f"p{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", self.br, "link", "set", f"p{k}", "master", "br0")
        sh("ip", "-n", self.br, "link", "set", f"p{k}", "up")
        sh("ip", "-n", ns, "addr", "add", f"{self.addr(k)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        for where, dev in ((ns, "eth0"), (self.br, f"p{k}")):
            sh("tc", "-n", where, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
            sh("tc", "-n", where, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
               "rate", tc_rate(bandwidth), "ceil", tc_rate(bandwidth),
               "burst", tc_burst(bandwidth), "cburst", tc_burst(bandwidth))
        make_cpu_group(self.cgroup(k), cpu, period_us)

    def set_bandwidth(self, k, bandwidth):
        """`tc class change` both ends of peer k's link (a mid-run change)."""
        for where, dev in ((self.ns(k), "eth0"), (self.br, f"p{k}")):
            sh("tc", "-n", where, "class", "change", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
               "rate", tc_rate(bandwidth), "ceil", tc_rate(bandwidth),
               "burst", tc_burst(bandwidth), "cburst", tc_burst(bandwidth))

    def start(self, k, argv, stdout=None, stderr=None, env=None):
        """Start argv in peer k's namespace and cgroup. The child joins the cgroup before it
        execs nsenter, so the command never runs uncapped."""
        p = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.ns(k)}", "--"] + list(argv),
                             stdout=stdout, stderr=stderr, env=env, preexec_fn=joiner(self.cgroup(k), setsid=True))
        with self._lock:
            self.procs.append(p)
        return p

    def run(self, k, argv, timeout):
        """Run argv in peer k's namespace and cgroup to the end; returns (rc, stdout, stderr)."""
        p = self.start(k, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            return 124, out.decode(errors="replace"), err.decode(errors="replace")
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    # ---- tearing down ----
    def teardown(self):
        with self._lock:
            procs, self.procs = self.procs, []
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                kill_group(p)
        cleanup(self.prefix)


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def reap(p):
    """Reap `p` (a Popen of Testbed.start) if it has exited: (exit code, its CPU seconds: user
    plus system time of all its threads, as wait4 reports it), else None. nsenter execs the
    command, so the process reaped is the peer itself. The Popen learns its exit code too."""
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
    if pid == 0:
        return None
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, ru.ru_utime + ru.ru_stime


def leftovers(prefix):
    """Namespaces and cgroups of `prefix` that exist now (empty when torn down)."""
    left = []
    r = sh("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name == prefix or name.startswith(prefix + "-"):
            left.append(f"netns {name}")
    cg = os.path.join(CGROUP_CPU, prefix)
    if os.path.isdir(cg):
        left.append(f"cgroup {cg}")
    return left


def cleanup(prefix):
    """Remove every namespace and cgroup of `prefix` (idempotent). Processes still in its
    cgroups (ours: started by this prefix's testbed) are killed first; deleting a namespace
    deletes the veth ends in it, and with the bridge's namespace the bridge."""
    if not prefix.startswith("rtb-") or len(prefix) < 5:
        raise ValueError(f"refusing to clean up '{prefix}': testbed prefixes start with rtb-")
    base = os.path.join(CGROUP_CPU, prefix)
    groups = sorted(os.path.join(base, d) for d in os.listdir(base)) if os.path.isdir(base) else []
    groups = [g for g in groups if os.path.isdir(g)]
    for sig in (signal.SIGKILL,):
        for g in groups:
            try:
                pids = [int(x) for x in open(os.path.join(g, "cgroup.procs")).read().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
    r = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.split()]
    for name in names:
        if name.startswith(prefix + "-"):
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", name, check=False)
    remove_groups(groups + ([base] if os.path.isdir(base) else []))


def make_cpu_group(path, cpu, period_us):
    """A cgroup v1 `cpu` group at `path` with cfs_quota = cpu x period (cpu 0 or None: no cap)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
        f.write(str(int(period_us)))
    quota = -1 if not cpu else max(1000, int(round(cpu * period_us)))
    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(quota))


def joiner(group, setsid=False):
    """A Popen preexec_fn that moves the child into cgroup `group` before it execs (so it never
    runs uncapped), in a session of its own with `setsid`."""
    procs_file = os.path.join(group, "cgroup.procs")

    def enter():
        if setsid:
            os.setsid()
        with open(procs_file, "w") as f:
            f.write(str(os.getpid()))

    return enter


def remove_groups(groups):
    """rmdir the cgroups, children before parents, waiting up to 5 s for a last task to exit."""
    for g in groups:
        for _ in range(50):
            try:
                os.rmdir(g)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # its last task is still exiting


# ------------------------------------------------------------------------------------------
# A scenario run

def load_plan(rumor_sim, scenario, sets):
    cmd = [rumor_sim, scenario, "--testbed-plan"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(2)
    return json.loads(r.stdout)


def read_metrics(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return rows


def from_launch(rows, launched):
    """Rewrite each line's `t` (seconds since the process's metrics clock started) as seconds
    since the run's launch, by the `start` line's unix_time and t_offset. A Python peer's clock
    starts when rumor.Peer is made, after torch's import and the data's loading (tens of seconds
    under a CPU cap), rumor-peer's at once; a file without a start line is taken as is."""
    start = next((r for r in rows if r.get("event") == "start" and "unix_time" in r), None)
    if start is None:
        return rows
    shift = start["unix_time"] - start.get("t_offset", start.get("t", 0.0)) - launched
    for r in rows:
        if isinstance(r.get("t"), (int, float)):
            r["t"] = round(r["t"] + shift, 4)
    return rows


def summarize(plan, out, launched, ended, target):
    """summary.json: per peer its class, final accuracy, bytes, steps, training wall; for the
    run, the wall time from launch and p0's time to `target` (seconds from launch)."""
    peers = []
    for p in plan["peers"]:
        m = from_launch(read_metrics(os.path.join(out, f"{p['id']}.jsonl")), launched)
        done = next((r for r in reversed(m) if r.get("event") == "done"), None)
        evals = [r for r in m if r.get("event") == "eval"]
        hit = next((r["t"] for r in evals if (r.get("test_acc") or 0) >= target), None)
        peers.append({
            "id": p["id"], "class": p["class"], "bandwidth": p["bandwidth"], "cpu": p["cpu"],
            "done": done is not None,
            "test_acc": done.get("test_acc") if done else (evals[-1]["test_acc"] if evals else None),
            "bytes_sent": done.get("bytes_sent") if done else (evals[-1].get("bytes_sent") if evals else None),
            "steps": done.get("steps") if done else None,
            "samples_per_s": done.get("samples_per_s") if done else None,
            "t_done": done.get("t") if done else None,
            "time_to_target": hit,
            "evals": [[r["t"], r.get("step"), r.get("test_acc")] for r in evals],
        })
    return {"scenario": plan["scenario"], "target": target, "wall_s": ended - launched, "peers": peers}


def parse_flags(flags):
    """rumor-peer's flags as the plan gives them (--key value, or --key alone) into a dict."""
    out, i = {}, 0
    while i < len(flags):
        key = flags[i]
        if not key.startswith("--"):
            raise ValueError(f"unexpected argument {key!r} in the scenario's peer flags")
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[key], i = flags[i + 1], i + 2
        else:
            out[key], i = None, i + 1
    return out


# rumor-peer's flag -> examples/torch_quickstart.py --worker's flag of the same meaning
TORCH_WORKER_FLAGS = ("--epochs", "--steps", "--batch", "--lr", "--lr-schedule", "--decay-fraction", "--local-steps",
                      "--staleness", "--codec", "--mix-weight", "--settle", "--settle-max", "--seed", "--data",
                      "--min-peers", "--eval-every", "--swarm-epochs", "--outer-lr", "--outer-momentum")
# rumor-peer's defaults where the worker's differ (the plan lists only what a scenario changes)
TORCH_WORKER_DEFAULTS = {"--lr": "0.001", "--lr-schedule": "constant", "--mix-weight": "uniform", "--settle": "3",
                         "--settle-max": "60", "--local-steps": "auto", "--codec": "none", "--staleness": "inf"}


def torch_model_of(flags, torch_model):
    """The torch model both the Python peers and the DDP ranks train: `cnn` (the torch
    quickstart's two-conv CNN with batch norm), or the scenario's own `mlp:256,128` as `mlp`."""
    if torch_model == "cnn":
        return "cnn"
    model = flags.get("--model", "mlp:256,128")
    if model != "mlp:256,128":
        raise SystemExit(f"run.sh: the torch peers build mlp:256,128 (as `mlp`) or the quickstart's CNN "
                         f"(--torch-model cnn), not the scenario's {model}")
    return "mlp"


def torch_worker_argv(script, flags, torch_model, metrics, join):
    """examples/torch_quickstart.py --worker with the scenario's recipe and loop knobs: one
    Rumor Python peer (rumor.torch.GossipOptimizer) training the same torch model as DDP's
    ranks, p0 evaluating during training as DDP's rank 0 does, every peer at the end."""
    f = parse_flags(flags)
    for key, allowed in (("--optimizer", "adam"), ("--partition", "iid")):
        if f.get(key, allowed) != allowed:
            raise SystemExit(f"run.sh: --peer-cmd python trains with {key} {allowed} only (the scenario has "
                             f"{f[key]}); use --peer-cmd native")
    other = sorted(set(f) - set(TORCH_WORKER_FLAGS) - {"--optimizer", "--partition", "--model", "--shard"})
    if other:
        raise SystemExit(f"run.sh: --peer-cmd python has no equivalent of {', '.join(other)} (examples/"
                         "torch_quickstart.py --worker); use --peer-cmd native")
    if "--epochs" in f and float(f["--epochs"]) != int(float(f["--epochs"])):
        raise SystemExit(f"run.sh: --peer-cmd python trains whole epochs (the scenario has {f['--epochs']}); "
                         "set workload.steps instead")
    if "--epochs" in f:
        f["--epochs"] = str(int(float(f["--epochs"])))
    k, n = f["--shard"].split("/")
    argv = ["/usr/bin/python3", script, "--worker", "--shard", k, "--peers", n,
            "--model", torch_model_of(f, torch_model), "--metrics", metrics, "--eval-peers", "1"]
    for key in TORCH_WORKER_FLAGS:
        value = f.get(key, TORCH_WORKER_DEFAULTS.get(key))
        if value is not None:
            argv += [key, value]
    if join:
        argv += ["--join", join]
    return argv


def add_plan_peers(tb, plan, args):
    """Every peer of the plan in testbed `tb`: its link at its class's bandwidth, its cgroup at
    its class's cpu with the period --period-us, else the scenario's cpu_period (rumor-sim runs
    the peer in windows of that length), else the kernel's 100 ms."""
    for k, p in enumerate(plan["peers"]):
        tb.add_peer(k, p["bandwidth"], p["cpu"],
                    args.period_us or (round(p["cpu_period"] * 1e6) if p.get("cpu_period") else None))


def run_scenario(args):
    plan = load_plan(args.rumor_sim, args.scenario, args.set)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1)
    n = len(plan["peers"])
    if n > 200:
        raise SystemExit("run.sh: at most 200 peers fit the /24")
    with Testbed(args.prefix, args.subnet, args.period_us or 100000) as tb:
        add_plan_peers(tb, plan, args)
        seed = f"{tb.addr(0)}:{args.port}"
        procs = []
        launched = time.time()
        for k, p in enumerate(plan["peers"]):
            metrics = os.path.join(args.out, f"{p['id']}.jsonl")
            env = None
            if args.peer_cmd == "ddp":
                # One torch DDP rank per namespace, the scenario's model and recipe (its flags).
                argv = ["/usr/bin/python3", args.ddp_script, "--ddp", args.ddp, "--rank", str(k), "--world", str(n),
                        "--master", seed, "--metrics", metrics,
                        "--torch-model", torch_model_of(parse_flags(p["flags"]), args.torch_model)] + p["flags"]
            elif args.peer_cmd == "python":
                # Rumor's Python peers: the same torch model and recipe as the DDP ranks.
                argv = torch_worker_argv(args.torch_script, p["flags"], args.torch_model, metrics,
                                         seed if k > 0 else None)
                env = dict(os.environ, PYTHONPATH=args.python_path, OMP_NUM_THREADS="1",
                           RUMOR_LISTEN=f"{tb.addr(k)}:{args.port}", RUMOR_NAME=p["id"])
                env.pop("RUMOR_JOIN", None)
            else:
                argv = [args.rumor_peer, "--listen", f"{tb.addr(k)}:{args.port}", "--name", p["id"],
                        "--metrics", metrics] + p["flags"]
                if k > 0:
                    argv += ["--join", seed]
            log = open(os.path.join(args.out, f"{p['id']}.log"), "w")
            procs.append(tb.start(k, argv, stdout=log, stderr=log, env=env))
        timers = []
        for k, p in enumerate(plan["peers"]):
            for ch in p["bandwidth_changes"]:
                t = threading.Timer(max(0.0, launched + ch["at"] - time.time()), tb.set_bandwidth,
                                    (k, ch["bandwidth"]))
                t.daemon = True
                t.start()
                timers.append(t)
        print(f"run.sh: {n} peers in {tb.prefix}-p0..p{n - 1} ({tb.addr(0)}..{tb.addr(n - 1)}), logs in {args.out}",
              file=sys.stderr)
        rcs = [None] * n
        cpus = [None] * n
        deadline = launched + args.timeout
        ended = None
        while time.time() < deadline:
            for k, pr in enumerate(procs):
                if rcs[k] is None and (r := reap(pr)) is not None:
                    rcs[k], cpus[k] = r
                    ended = time.time()  # the last exit ends the run
            if all(rc is not None for rc in rcs):
                break
            time.sleep(0.05)
        for t in timers:
            t.cancel()
        timed_out = any(rc is None for rc in rcs)
        if ended is None:
            ended = time.time()
    summary = summarize(plan, args.out, launched, ended, args.target)
    for p, cpu in zip(summary["peers"], cpus):
        p["cpu_s"] = None if cpu is None else round(cpu, 3)  # the process's CPU, all threads
    summary["exit_codes"] = rcs
    summary["timed_out"] = timed_out
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for p in summary["peers"]:
        acc = "-" if p["test_acc"] is None else f"{p['test_acc']:.4f}"
        mb = "-" if p["bytes_sent"] is None else f"{p['bytes_sent'] / 1e6:.1f}"
        ttt = "-" if p["time_to_target"] is None else f"{p['time_to_target']:.1f}"
        print(f"{p['id']:>4} {p['class']:>10} cpu {p['cpu']:<5g} {p['bandwidth'] * 8 / 1e6:8.1f} Mbit  "
              f"acc {acc}  MB sent {mb}  t({args.target}) {ttt} s  done at {p['t_done']}")
    print(f"wall {summary['wall_s']:.1f} s from launch; exit codes {rcs}")
    if timed_out:
        print(f"run.sh: the run passed --timeout {args.timeout} s and was stopped", file=sys.stderr)
        return 1
    return 0 if all(rc == 0 for rc in rcs) else 1


# ------------------------------------------------------------------------------------------
# A calibration taken in the testbed (--calibrate)

# The loop knobs a calibration run sets itself: it trains a fixed number of steps alone.
CALIBRATION_DROPS = {"--epochs", "--steps", "--duration", "--swarm-epochs", "--min-peers", "--eval-every",
                     "--settle", "--settle-max", "--join"}


def calibration_argv(args, p, k, steps, addr, metrics, seed=None, n=1):
    """Peer k of the plan for a calibration run: its model, recipe, class cap and link, `steps`
    steps, no evaluation during training, no settling. Alone (a swarm of one) without `seed`;
    with it, one of a swarm of `n` that waits for all and exchanges after every step (H = 1)."""
    flags, i = [], 0
    src = list(p["flags"])
    drops = CALIBRATION_DROPS | ({"--local-steps"} if seed else set())
    while i < len(src):
        key = src[i]
        takes = i + 1 < len(src) and not src[i + 1].startswith("--")
        if key not in drops:
            flags += src[i:i + (2 if takes else 1)]
        i += 2 if takes else 1
    flags += ["--steps", str(steps), "--min-peers", str(n if seed else 1), "--settle", "0"]
    if seed:
        flags += ["--local-steps", "1"]
    join = seed if seed and k > 0 else None
    if args.peer_cmd == "python":
        argv = torch_worker_argv(args.torch_script, flags + ["--eval-every", "-1"], args.torch_model, metrics, join)
        env = dict(os.environ, PYTHONPATH=args.python_path, OMP_NUM_THREADS="1", RUMOR_LISTEN=f"{addr}:{args.port}",
                   RUMOR_NAME=p["id"])
        env.pop("RUMOR_JOIN", None)
        return argv, env
    return [args.rumor_peer, "--listen", f"{addr}:{args.port}", "--name", p["id"], "--metrics", metrics,
            "--eval-every", str(10 ** 12)] + flags + (["--join", join] if join else []), None


def calibration_pass(args, plan, steps, out, swarm=False):
    """Every peer of the plan at once in its namespace and cgroup, each alone (or with `swarm`
    all one swarm exchanging after every step): (wall, CPU) of each process from launch to exit."""
    n = len(plan["peers"])
    with Testbed(args.prefix, args.subnet, args.period_us or 100000) as tb:
        add_plan_peers(tb, plan, args)
        procs, started, logs = [], [], []
        for k, p in enumerate(plan["peers"]):
            argv, env = calibration_argv(args, p, k, steps, tb.addr(k), os.path.join(out, f"{p['id']}.jsonl"),
                                         f"{tb.addr(0)}:{args.port}" if swarm else None, n)
            logs.append(open(os.path.join(out, f"{p['id']}.log"), "w"))
            started.append(time.time())
            procs.append(tb.start(k, argv, stdout=logs[-1], stderr=logs[-1], env=env))
        res = [None] * n
        deadline = time.time() + args.timeout
        while time.time() < deadline and any(r is None for r in res):
            for k, pr in enumerate(procs):
                if res[k] is None and (r := reap(pr)) is not None:
                    res[k] = (r[0], time.time() - started[k], r[1])
            time.sleep(0.02)
    for log in logs:
        log.close()
    for k, r in enumerate(res):
        if r is None:
            raise SystemExit(f"run.sh --calibrate: {plan['peers'][k]['id']} did not finish {steps} steps within "
                             f"--timeout {args.timeout:g} s (its log: {out}/{plan['peers'][k]['id']}.log)")
        if r[0] != 0:
            raise SystemExit(f"run.sh --calibrate: {plan['peers'][k]['id']} exited with {r[0]} "
                             f"(its log: {out}/{plan['peers'][k]['id']}.log)")
    return [(wall, cpu) for _, wall, cpu in res]


def calibrate_scenario(args):
    """What the testbed's peers spend, measured in the testbed: every peer of the scenario in
    its namespace and cgroup (its class's cap and link, all of them at once, so the machine is
    as loaded as in the run), three times:
      1. alone (a swarm of one), a short run of steps;
      2. alone, a long run;
      3. all one swarm, the long run, exchanging after every step (H = 1, the scenario's codec).
    The difference of 2 and 1 in process CPU (every thread, user and system) over the difference
    of steps is the CPU of one step, start-up, loading and the last evaluation cancelling out.
    The difference of 3 and 2, summed over the peers, over the payload messages they handled
    (each peer's metrics count the exchanges it started and answered, and each of those sent it
    one payload and brought it one) is rumor-sim's exchange_cpu (charged per payload message at
    each end), the shaped path's kernel work included. Writes a fragment with each class's
    step_time and exchange_cpu (CPU seconds of one whole core: the class's cpu divides them in
    rumor-sim), to include after the other calibrations, and prints how much of its cap each
    peer used while it stepped."""
    plan = load_plan(args.rumor_sim, args.scenario, args.set)
    short, long_ = args.calibrate_steps or ((150, 750) if args.peer_cmd == "python" else (1000, 5000))
    n = len(plan["peers"])
    os.makedirs(args.out, exist_ok=True)
    passes = []
    for steps, swarm in ((short, False), (long_, False), (long_, True)):
        d = os.path.join(args.out, f"{'swarm' if swarm else 'alone'}{steps}")
        os.makedirs(d, exist_ok=True)
        how = "one swarm exchanging every step" if swarm else "each alone"
        print(f"run.sh --calibrate: {n} peers, {how}, {steps} steps each ...", file=sys.stderr)
        passes.append((d, calibration_pass(args, plan, steps, d, swarm)))
    rows, classes = [], {}
    exchanges, extra = 0, 0.0
    for k, p in enumerate(plan["peers"]):
        (w0, c0), (w1, c1), (w2, c2) = passes[0][1][k], passes[1][1][k], passes[2][1][k]
        step_cpu = (c1 - c0) / (long_ - short)
        step_wall = (w1 - w0) / (long_ - short)
        used = step_cpu / (step_wall * p["cpu"]) if p["cpu"] and step_wall > 0 else None
        done = next((r for r in reversed(read_metrics(os.path.join(passes[2][0], f"{p['id']}.jsonl")))
                     if r.get("event") == "done"), {})
        ex = int(done.get("exchanges") or 0)
        exchanges += ex
        extra += c2 - c1
        rows.append({"id": p["id"], "class": p["class"], "cpu": p["cpu"], "step_cpu": step_cpu,
                     "step_wall": step_wall, "cap_used": used, "cpu_s": [c0, c1, c2], "wall_s": [w0, w1, w2],
                     "exchanges": ex, "bytes_sent": done.get("bytes_sent")})
        classes.setdefault(p["class"], []).append(step_cpu)
    # every exchange a peer took part in (started or answered) sent it a payload and brought it one
    exchange_cpu = extra / (2 * exchanges) if exchanges and extra > 0 else None
    kind = {"python": f"Rumor's Python peers ({args.torch_model} torch model)"}.get(args.peer_cmd, "rumor-peer")
    frag = os.path.join(args.out, "testbed_calibration.ini")
    with open(frag, "w") as f:
        f.write(f"# {kind} on the testbed of {os.path.basename(args.scenario)} (run.sh --calibrate, "
                f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC): every peer in its namespace and\n"
                f"# cgroup, all at once. step_time: the difference of the process CPU (all threads, user + system)\n"
                f"# of {long_} and {short} steps alone, per step. exchange_cpu: what {long_} steps in one swarm with\n"
                f"# H = 1 cost above {long_} alone, over the payload messages sent and received ({2 * exchanges}).\n"
                "# Seconds of one whole core (the class's cpu divides them); include it after the other\n"
                "# calibrations.\n")
        for name, vals in classes.items():
            f.write(f"[class.{name}]\nstep_time = {statistics.median(vals):.6f}\n")
            if exchange_cpu is not None:
                f.write(f"exchange_cpu = {exchange_cpu:.6f}\n")
    with open(os.path.join(args.out, "testbed_calibration.json"), "w") as f:
        json.dump({"scenario": plan["scenario"], "peer_cmd": args.peer_cmd, "steps": [short, long_],
                   "exchanges": exchanges, "exchange_cpu": exchange_cpu, "peers": rows}, f, indent=1)
    print(f"{'peer':>4} {'class':>10} {'cap':>5} {'step CPU ms':>11} {'step wall ms':>12} {'cap used':>8} "
          f"{'exchanges':>9} {'their CPU s':>11}")
    for r in rows:
        used = "-" if r["cap_used"] is None else f"{r['cap_used']:.2f}"
        print(f"{r['id']:>4} {r['class']:>10} {r['cpu']:>5g} {r['step_cpu'] * 1e3:11.3f} {r['step_wall'] * 1e3:12.2f} "
              f"{used:>8} {r['exchanges']:>9} {r['cpu_s'][2] - r['cpu_s'][1]:11.2f}")
    if exchange_cpu is None:
        print(f"run.sh --calibrate: the swarm's peers took part in {exchanges} exchanges for {extra:+.2f} s of "
              "CPU: no exchange_cpu written", file=sys.stderr)
    else:
        print(f"exchange CPU {exchange_cpu * 1e3:.3f} ms per payload message at each end ({2 * exchanges} sent and "
              f"received, {extra:.2f} s of CPU)")
    print(f"calibration in {frag}")
    return 0


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(
        prog="run.sh",
        description="Run a rumor-sim scenario on real peers: one network namespace per peer on one bridge, "
                    "links shaped both ways with htb to the class bandwidth, each peer in a cgroup with the "
                    "class CPU share (docs/testbed.md). Needs root, ip netns, tc htb and cgroup v1 cpu; "
                    f"exits {SKIP} with the reason where they are missing.",
        epilog="Scenario keys it uses: [class.NAME] count, bandwidth, cpu (share of one core), bandwidth_change "
               "(RATE@T, applied with tc class change); the peers' flags come from `rumor-sim SCENARIO "
               "--peer-flags`. Outputs in --out: plan.json, pK.log, pK.jsonl (metrics), summary.json; its "
               "times are seconds from launch.")
    ap.add_argument("scenario", nargs="?", help="a rumor-sim scenario file (examples/testbed/S0.ini ...)")
    ap.add_argument("--out", default=os.path.join(root, "out", "testbed"), help="output directory (default out/testbed)")
    ap.add_argument("--peer-cmd", choices=["native", "python", "ddp"], default="native",
                    help="what runs in each namespace: native rumor-peer; python: a Rumor Python peer "
                         "(examples/torch_quickstart.py --worker: rumor.torch.GossipOptimizer, the scenario's "
                         "recipe and loop knobs); ddp: a torch DDP rank (gloo, bench/testbed_ddp.py, the same "
                         "torch model and recipe)")
    ap.add_argument("--torch-model", choices=["scenario", "cnn"], default="scenario",
                    help="--peer-cmd python and ddp: the scenario's mlp:256,128 as torch layers, or the torch "
                         "quickstart's CNN (two conv layers with batch norm, ~207k parameters; 0.88+ in 3 epochs)")
    ap.add_argument("--ddp", choices=["plain", "powersgd", "postlocal"], default="plain",
                    help="--peer-cmd ddp: plain DDP, the PowerSGD hook, or post-local SGD with period 8")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a scenario key, as rumor-sim --set (repeatable)")
    ap.add_argument("--build", default=os.path.join(root, "build"), help="build directory (default build)")
    ap.add_argument("--prefix", default=None, help="name prefix of namespaces and cgroups (default rtb-<pid>)")
    ap.add_argument("--subnet", default="10.213.7", help="the private /24, first three octets (default 10.213.7)")
    ap.add_argument("--port", type=int, default=7000, help="every peer listens on this port in its namespace")
    ap.add_argument("--period-us", type=int, default=None,
                    help="cfs_period_us of the CPU caps (default: the scenario's cpu_period, else 100000, the "
                         "kernel's; with 10000 a 0.075 cap gave 0.34 of a core here)")
    ap.add_argument("--timeout", type=float, default=600, help="stop the run after this many seconds (default 600)")
    ap.add_argument("--target", type=float, default=0.85, help="accuracy whose first crossing by each peer is reported")
    ap.add_argument("--calibrate", action="store_true",
                    help="measure instead of run: every peer of the scenario in its namespace and cgroup, all at "
                         "once, alone for a short and a long run of steps, then as one swarm exchanging every step; "
                         "writes OUT/testbed_calibration.ini (each class's step_time and exchange_cpu as the capped "
                         "peers spend them, every thread and the shaped path's kernel work, for rumor-sim to include "
                         "after the other calibrations) and prints each peer's step CPU, step wall time and the "
                         "share of its cap it used (native and python peers)")
    ap.add_argument("--calibrate-steps", default=None, metavar="SHORT,LONG",
                    help="--calibrate: the two runs' steps (default 1000,5000 for rumor-peer, 150,750 for python)")
    ap.add_argument("--check", action="store_true", help="only check that this machine can host a testbed")
    ap.add_argument("--cleanup", metavar="PREFIX", help="remove what a killed run of PREFIX left, and exit")
    args = ap.parse_args(argv)
    args.rumor_sim = os.path.join(args.build, "sim", "rumor-sim")
    args.rumor_peer = os.path.join(args.build, "peer", "rumor-peer")
    args.ddp_script = os.path.join(root, "bench", "testbed_ddp.py")
    args.torch_script = os.path.join(root, "examples", "torch_quickstart.py")
    args.python_path = os.path.join(args.build, "python")
    if args.cleanup:
        cleanup(args.cleanup)
        left = leftovers(args.cleanup)
        print("\n".join(left) if left else f"nothing of {args.cleanup} left")
        return 1 if left else 0
    why = Testbed.refusal()
    if why:
        print(f"run.sh: cannot build a testbed here: {why}", file=sys.stderr)
        return SKIP
    if args.check:
        print("run.sh: this machine can host a testbed")
        return 0
    if not args.scenario:
        ap.error("a scenario file is required")
    for b in (args.rumor_sim, args.rumor_peer):
        if not os.access(b, os.X_OK):
            ap.error(f"{b} not found: build first (cmake --build {args.build})")
    if args.peer_cmd == "python" and not os.path.isdir(os.path.join(args.python_path, "rumor")):
        ap.error(f"{args.python_path}/rumor not found: build the Python module first "
                 f"(cmake --build {args.build} --target rumor_python)")
    if args.calibrate_steps is not None:
        raw = args.calibrate_steps
        try:
            args.calibrate_steps = tuple(int(x) for x in raw.split(","))
            ok = len(args.calibrate_steps) == 2 and 0 < args.calibrate_steps[0] < args.calibrate_steps[1]
        except ValueError:
            ok = False
        if not ok:
            ap.error(f"--calibrate-steps takes SHORT,LONG with 0 < SHORT < LONG (e.g. 1000,5000), not '{raw}'")
    if args.calibrate and args.peer_cmd == "ddp":
        ap.error("--calibrate measures rumor-peer or Rumor's Python peers (--peer-cmd native or python), not DDP ranks")
    try:
        return calibrate_scenario(args) if args.calibrate else run_scenario(args)
    except KeyboardInterrupt as e:
        print(f"run.sh: stopped ({e}); the testbed is torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
