#!/usr/bin/python3
"""A chaos soak of real processes (docs/testing.md, "The chaos soak").

rumor-peer processes and Python peers (examples/torch_quickstart.py's worker, the same MLP)
train Fashion-MNIST shards on loopback for --duration seconds while faults are drawn from --seed,
about one every --fault-every seconds:

  kill        SIGKILL a rumor-peer (it checkpoints every 0.25 s, so a kill often lands in the
              middle of a write) and restart it 1-5 s later with --resume from its checkpoints
  kill-py     SIGKILL a Python peer and start it again 1-5 s later (it rejoins and takes the
              swarm's model)
  stop        SIGSTOP a peer, SIGCONT it 1-20 s later (--max-stop)
  join        start a new rumor-peer that joins through a running member
  leave       SIGTERM a rumor-peer (a graceful leave; its slot is free for a later joiner)

  cut         (namespaces) take a peer's link down (`ip link set down`), up again 1-20 s later
  slow        (namespaces) drop a peer's bandwidth from 1 Gbit/s to 20 Mbit/s (`tc class
              change`) for 5-30 s

With --net netns (the default where examples/testbed can build one: root, ip, tc, a cgroup v1
cpu controller) every member runs in its own network namespace on one bridge, in the testbed's
private 10.213.7.0/24, and the namespaces are torn down at the end whatever happens; with
--net loopback (or where namespaces cannot be made) the peers share 127.0.0.1 and link cuts and
bandwidth drops are not drawn.

Every process gets a bound: its start, the time to load the data and join (--load-bound), the
training time it was given, settling (--settle-max) and a margin, plus the time it spent
stopped. At the end it reports the faults injected per kind and checks:
  - no process ran past its bound (a hang: the process is killed and counted);
  - no process exited with an error of its own (a join that failed, a crash);
  - every checkpoint directory verifies (rumor-peer --verify-checkpoints: whole, checksummed,
    every value finite);
  - no evaluation saw a non-finite loss and no peer reported divergence;
  - the survivors' final accuracy (the peers that trained to the end) against --reference
    ACC (a fault-free run's) within --max-drop, when given; --fault-free runs that reference.
Exit 0 when every check passes, 1 otherwise.

Usage: bench/chaos.py [--duration 600] [--peers 8] [--python-peers 2] [--seed 1] [--build build]
                      [--out out/chaos] [--fault-every 4] [--fault-free] [--reference ACC]
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FMNIST = "/usr/share/datasets/fashion-mnist"
GBIT, SLOW = 125e6, 2.5e6  # bytes/s: 1 Gbit/s, and 20 Mbit/s while a link is slowed


class Life:
    """One process of one member: a member can live several times (restarts)."""

    def __init__(self, member, proc, started, train_s, log, metrics):
        self.member, self.proc, self.started, self.train_s = member, proc, started, train_s
        self.log, self.metrics = log, metrics
        self.stopped_at = None      # SIGSTOPped since
        self.stopped_total = 0.0
        self.killed = False         # by us (SIGKILL): its exit code is ours
        self.termed = False         # by us (SIGTERM): a graceful leave
        self.hung = False
        self.rc = None

    def bound(self, a):
        return self.started + a.load_bound + self.train_s + a.settle_max + a.margin + self.stopped_total + (
            time.monotonic() - self.stopped_at if self.stopped_at else 0.0)

    def address(self):
        try:
            with open(self.log) as f:
                m = re.search(r"listening on ([0-9.]+:\d+)", f.read())
            return m.group(1) if m else None
        except OSError:
            return None


class Member:
    def __init__(self, name, kind, shard, ckpt, slot):
        self.name, self.kind, self.shard, self.ckpt, self.slot = name, kind, shard, ckpt, slot
        self.lives = []
        self.restart_at = None      # a kill's restart time
        self.gone = False           # left for good (SIGTERM) or finished
        self.tmp_seen = set()       # checkpoint .tmp files left by earlier kills

    @property
    def life(self):
        return self.lives[-1] if self.lives else None

    def running(self):
        l = self.life
        return l is not None and l.proc.poll() is None and not l.killed


def start(a, m, end, join, resume, tb=None, min_peers=0, train_s=None):
    now = time.monotonic()
    if tb is not None and m.slot not in tb.peers:
        tb.add_peer(m.slot, GBIT, 0)
    listen = f"{tb.addr(m.slot)}:7000" if tb is not None else "127.0.0.1:0"
    train_s = train_s or max(5.0, end - now - a.load_estimate)
    k = len(m.lives)
    log = os.path.join(a.out, f"{m.name}.{k}.log")
    metrics = os.path.join(a.out, f"{m.name}.{k}.jsonl")
    data = a.data
    if m.kind == "cpp":
        cmd = [os.path.join(a.build, "peer", "rumor-peer"), "--listen", listen, "--data", data, "--model",
               "mlp:256,128", "--shard", f"{m.shard}/{a.shards}", "--duration", f"{train_s:.1f}", "--eval-every",
               str(a.eval_every), "--settle", "2", "--settle-max", str(a.settle_max), "--checkpoint", m.ckpt,
               "--checkpoint-every", "0.25", "--name", m.name, "--metrics", metrics, "--seed", "1",
               "--log-level", "info"]
        if join:
            cmd += ["--join", join]
        if min_peers:
            cmd += ["--min-peers", str(min_peers)]
        if resume and os.path.isdir(m.ckpt) and any(f.endswith(".rkpt") for f in os.listdir(m.ckpt)):
            cmd.append("--resume")
    else:
        cmd = [sys.executable, os.path.join(ROOT, "examples", "torch_quickstart.py"), "--worker", "--model", "mlp",
               "--peers", str(a.shards), "--shard", str(m.shard), "--epochs", "1000", "--duration", f"{train_s:.1f}",
               "--eval-every", str(a.eval_every), "--settle", "2", "--settle-max", str(a.settle_max), "--name", m.name,
               "--metrics", metrics, "--data", data, "--seed", "1"]
        if join:
            cmd += ["--join", join]
        if min_peers:
            cmd += ["--min-peers", str(min_peers)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(a.build, "python"), RUMOR_LISTEN=listen)
    f = open(log, "w")
    if tb is not None:
        proc = tb.start(m.slot, cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    else:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    m.lives.append(Life(m, proc, now, train_s, log, metrics))
    return m.lives[-1]


def lines(path, kind=None):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if kind is None or d.get("event") == kind:
                    out.append(d)
    except OSError:
        pass
    return out


def soak(a, tb=None):
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        p = os.path.join(a.out, f)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    members = []
    for i in range(a.peers + a.python_peers):
        kind = "cpp" if i < a.peers else "py"
        name = f"c{i + 1}" if kind == "cpp" else f"py{i + 1 - a.peers}"
        members.append(Member(name, kind, i % a.shards + 1, os.path.join(a.out, f"ckpt-{name}"), i + 1))
    t0 = time.monotonic()
    end = t0 + a.duration
    faults = {k: 0 for k in ("kill", "kill-py", "stop", "join", "leave", "cut", "slow", "restart",
                             "kill-mid-checkpoint")}
    restores = []  # (time, what, action): healing a cut link, restoring a bandwidth
    say = lambda msg: print(f"[chaos {time.monotonic() - t0:6.1f} s] {msg}", flush=True)
    # The founder first; the others join through it once it listens.
    # The founders train once all of them are in view (--min-peers), so none trains alone while
    # the others still load their data; restarts and joiners join through every running member.
    first = start(a, members[0], end, None, False, tb, len(members), a.duration)
    deadline = time.monotonic() + 60
    while not first.address() and time.monotonic() < deadline:
        if first.proc.poll() is not None:
            sys.exit(f"the first peer exited: see {first.log}")
        time.sleep(0.1)
    if not first.address():
        sys.exit(f"the first peer did not listen within 60 s: see {first.log}")
    for m in members[1:]:
        start(a, m, end, first.address(), False, tb, len(members), a.duration)
    # The soak's clock starts when every founder trains (all in view): faults from then on.
    deadline = time.monotonic() + a.load_bound
    while time.monotonic() < deadline:
        if all(lines(m.life.metrics, "peers_in_view") for m in members):
            break
        broken = [m.name for m in members if m.life.proc.poll() is not None]
        if broken:
            sys.exit(f"{', '.join(broken)} exited before training: see their logs in {a.out}")
        time.sleep(0.2)
    else:
        sys.exit(f"the founders were not all in view within {a.load_bound:g} s: see the logs in {a.out}")
    t0 = time.monotonic()
    end = t0 + a.duration
    say(f"{len(members)} peers started ({a.peers} rumor-peer, {a.python_peers} Python); "
        f"{'faults about every %g s' % a.fault_every if a.fault_every > 0 else 'no faults'} until {a.duration:g} s")
    next_fault = t0 + a.warmup + (rng.expovariate(1.0 / a.fault_every) if a.fault_every > 0 else math.inf)
    hangs, spare = 0, 0
    last_progress = t0
    while True:
        now = time.monotonic()
        alive = [m for m in members if m.running()]
        if now >= end and not alive and all(m.restart_at is None for m in members):
            break
        for r in [r for r in restores if now >= r[0]]:
            restores.remove(r)
            r[2]()
            say(r[1])
        for m in members:
            l = m.life
            if l and l.stopped_at and now >= l.stopped_at + l.stop_for:
                l.proc.send_signal(signal.SIGCONT) if l.proc.poll() is None else None
                l.stopped_total += now - l.stopped_at
                l.stopped_at = None
            if m.restart_at is not None and now >= m.restart_at:
                m.restart_at = None
                if now < end - 10:
                    donors = [d for d in (x.life.address() for x in members if x.running() and x is not m) if d]
                    start(a, m, end, ",".join(donors) or None, True, tb)
                    faults["restart"] += 1
                    say(f"{m.name} restarted ({'from its checkpoints' if m.kind == 'cpp' else 'fresh'})")
            if l and l.proc.poll() is None and not l.hung and now > l.bound(a):
                l.hung = True
                hangs += 1
                say(f"HANG: {m.name} (life {len(m.lives)}) ran past its bound; killing it")
                l.proc.send_signal(signal.SIGCONT)
                l.proc.kill()
        if now >= next_fault and now < end - 15:
            next_fault = now + rng.expovariate(1.0 / a.fault_every)
            running = [m for m in members if m.running() and m.life.stopped_at is None]
            cpp = [m for m in running if m.kind == "cpp"]
            # Only the kinds that apply now (never below --min-running peers that run).
            spare_ok = len(running) > a.min_running
            can = {"kill": 3 if spare_ok and cpp else 0,
                   "kill-py": 1 if spare_ok and any(m.kind == "py" for m in running) else 0,
                   "stop": 3 if spare_ok else 0, "join": 1 if running and now < end - 30 else 0,
                   "leave": 1 if spare_ok and len(cpp) > 1 else 0,
                   "cut": 2 if tb is not None and spare_ok else 0, "slow": 1 if tb is not None and running else 0}
            busy = {r[3] for r in restores}  # a slot whose link is cut or slowed already
            if not any(can.values()):
                continue
            kind = rng.choices(list(can), list(can.values()))[0]
            if kind == "kill" and cpp:
                m = rng.choice(cpp)
                m.life.killed = True
                m.life.proc.kill()
                m.life.proc.wait()
                m.restart_at = now + rng.uniform(1, 5)
                faults["kill"] += 1
                # A checkpoint being written when it died leaves its temporary file behind.
                tmps = {f for f in os.listdir(m.ckpt) if f.endswith(".tmp")} if os.path.isdir(m.ckpt) else set()
                mid = bool(tmps - m.tmp_seen)  # (a stray one stays: the daemon ignores it)
                m.tmp_seen |= tmps
                faults["kill-mid-checkpoint"] += mid
                say(f"SIGKILL {m.name}{' (mid-checkpoint)' if mid else ''}")
            elif kind == "kill-py" and [m for m in running if m.kind == "py"]:
                m = rng.choice([m for m in running if m.kind == "py"])
                m.life.killed = True
                m.life.proc.kill()
                m.restart_at = now + rng.uniform(1, 5)
                faults["kill-py"] += 1
                say(f"SIGKILL {m.name}")
            elif kind == "stop" and running:
                m = rng.choice(running)
                m.life.stop_for = rng.uniform(1, a.max_stop)
                m.life.stopped_at = now
                m.life.proc.send_signal(signal.SIGSTOP)
                faults["stop"] += 1
                say(f"SIGSTOP {m.name} for {m.life.stop_for:.1f} s")
            elif kind == "leave" and len(cpp) > 1:
                m = rng.choice(cpp)
                m.life.termed = True
                m.life.proc.send_signal(signal.SIGTERM)
                m.gone = True
                faults["leave"] += 1
                say(f"SIGTERM {m.name} (a graceful leave)")
            elif kind in ("cut", "slow") and [m for m in running if m.slot not in busy]:
                m = rng.choice([m for m in running if m.slot not in busy])
                k = m.slot
                if kind == "cut":
                    dev = ("ip", "-n", tb.br, "link", "set", f"p{k}")
                    subprocess.run([*dev, "down"], check=True)
                    back = rng.uniform(1, 20)
                    restores.append((now + back, f"{m.name}'s link is up again",
                                     lambda dev=dev: subprocess.run([*dev, "up"], check=True), k))
                    say(f"link of {m.name} down for {back:.1f} s")
                else:
                    tb.set_bandwidth(k, SLOW)
                    back = rng.uniform(5, 30)
                    restores.append((now + back, f"{m.name}'s link back to 1 Gbit/s",
                                     lambda k=k: tb.set_bandwidth(k, GBIT), k))
                    say(f"bandwidth of {m.name} down to 20 Mbit/s for {back:.1f} s")
                faults[kind] += 1
            elif kind == "join" and running and now < end - 30:
                spare += 1
                m = Member(f"j{spare}", "cpp", (len(members)) % a.shards + 1,
                           os.path.join(a.out, f"ckpt-j{spare}"), len(members) + 1)
                members.append(m)
                donor = ",".join(d for d in (x.life.address() for x in running) if d)
                start(a, m, end, donor, False, tb)
                faults["join"] += 1
                say(f"{m.name} joins")
        if now - last_progress >= 30:
            last_progress = now
            say(f"{len([m for m in members if m.running()])} running; faults so far {sum(faults.values())}")
        time.sleep(0.05)
    return members, faults, hangs, time.monotonic() - t0


def report(a, members, faults, hangs, wall):
    problems = []
    say = lambda msg: print(msg, flush=True)
    injected = {k: v for k, v in faults.items() if k not in ("restart", "kill-mid-checkpoint")}
    say(f"== faults injected: {sum(injected.values())} ({', '.join(f'{k} {v}' for k, v in faults.items())}); "
        f"{'network namespaces' if a.net == 'netns' else 'loopback: link cuts and bandwidth drops not drawn'}; "
        f"wall {wall:.0f} s")
    if hangs:
        problems.append(f"{hangs} process(es) ran past their bound")
    own_errors = []
    for m in members:
        for k, l in enumerate(m.lives):
            l.rc = l.proc.wait()
            if l.killed or l.hung:
                continue
            if l.rc != 0 and not (l.termed and l.rc == -signal.SIGTERM):  # SIGTERM before its handler: fine
                own_errors.append(f"{m.name} life {k} exited {l.rc} (see {l.log})")
    problems += own_errors
    bad_ckpt = []
    for m in members:
        if m.kind != "cpp" or not os.path.isdir(m.ckpt):
            continue
        r = subprocess.run([os.path.join(a.build, "peer", "rumor-peer"), "--verify-checkpoints", m.ckpt],
                           capture_output=True, text=True)
        if r.returncode != 0 and "no checkpoint" not in r.stdout:
            bad_ckpt.append(f"{m.name}: {r.stdout.strip()}")
    checked = sum(1 for m in members if m.kind == "cpp" and os.path.isdir(m.ckpt))
    if bad_ckpt:
        problems.append("checkpoints that do not verify: " + "; ".join(bad_ckpt))
    nonfinite = []
    for m in members:
        for l in m.lives:
            for e in lines(l.metrics):
                if e.get("event") == "diverged" or (e.get("event") in ("eval", "done") and (
                        e.get("loss") is None or not math.isfinite(e.get("loss", 0.0)))):
                    if e.get("event") == "eval" and e.get("step") == 0 and e.get("loss") is None:
                        continue
                    nonfinite.append(f"{m.name}: {json.dumps(e)[:120]}")
    if nonfinite:
        problems.append(f"{len(nonfinite)} non-finite evaluation(s) or divergence(s): {nonfinite[:3]}")
    finals = {}
    for m in members:
        l = m.life
        if l and not l.killed and not l.termed and not l.hung and l.rc == 0:
            d = lines(l.metrics, "done")
            if d and d[-1].get("test_acc") is not None:
                finals[m.name] = d[-1]["test_acc"]
    lives = sum(len(m.lives) for m in members)
    say(f"== {lives} processes in {len(members)} members: {hangs} hung, {len(own_errors)} exited with an error of "
        f"their own; checkpoints of {checked} rumor-peer members verified ({len(bad_ckpt)} bad); "
        f"{len(nonfinite)} non-finite evaluations")
    if finals:
        med = statistics.median(finals.values())
        say(f"== survivors' final accuracy: median {med:.4f} over {len(finals)} "
            f"({', '.join(f'{k} {v:.4f}' for k, v in sorted(finals.items()))})")
        if a.reference is not None:
            say(f"   against the fault-free reference {a.reference:.4f}: {100 * (med - a.reference):+.2f} points "
                f"(at most {100 * a.max_drop:.1f} lost allowed)")
            if med < a.reference - a.max_drop:
                problems.append(f"survivors' median {med:.4f} more than {a.max_drop} below the reference")
        if a.min_accuracy and med < a.min_accuracy:
            problems.append(f"survivors' median accuracy {med:.4f} < {a.min_accuracy}")
    else:
        problems.append("no peer trained to the end")
    if a.min_faults and sum(injected.values()) < a.min_faults:
        problems.append(f"only {sum(injected.values())} faults injected (< {a.min_faults})")
    with open(os.path.join(a.out, "chaos.json"), "w") as f:
        json.dump({"faults": faults, "hangs": hangs, "own_errors": own_errors, "bad_checkpoints": bad_ckpt,
                   "nonfinite": nonfinite, "finals": finals, "wall_s": wall, "problems": problems}, f, indent=1)
    for p in problems:
        say(f"FAIL: {p}")
    say("== chaos soak: " + ("PASS" if not problems else "FAIL") + f" (details in {a.out}/chaos.json)")
    return 0 if not problems else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--duration", type=float, default=600, help="seconds of the soak (default 600)")
    ap.add_argument("--peers", type=int, default=8, help="rumor-peer processes at the start (default 8)")
    ap.add_argument("--python-peers", type=int, default=2, help="Python peers (default 2)")
    ap.add_argument("--shards", type=int, default=0, help="the data is cut in this many shards (default: every peer)")
    ap.add_argument("--seed", type=int, default=1, help="draws the faults (default 1)")
    ap.add_argument("--fault-every", type=float, default=4.0, help="mean seconds between faults (0: none)")
    ap.add_argument("--fault-free", action="store_true", help="no faults: the reference run")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds before the first fault")
    ap.add_argument("--max-stop", type=float, default=20.0, help="longest SIGSTOP in seconds (default 20)")
    ap.add_argument("--min-running", type=int, default=3, help="never fault below this many running peers")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--settle-max", type=float, default=10.0)
    ap.add_argument("--load-bound", type=float, default=120.0,
                    help="seconds a process may take to load its data and join (default 120)")
    ap.add_argument("--load-estimate", type=float, default=5.0)
    ap.add_argument("--margin", type=float, default=30.0, help="seconds of slack in every bound")
    ap.add_argument("--reference", type=float, default=None, help="a fault-free run's median final accuracy")
    ap.add_argument("--max-drop", type=float, default=0.01, help="survivors may end this far below --reference")
    ap.add_argument("--min-accuracy", type=float, default=0.0, help="fail below this median final accuracy")
    ap.add_argument("--min-faults", type=int, default=0, help="fail with fewer faults injected")
    ap.add_argument("--net", choices=("auto", "netns", "loopback"), default="auto",
                    help="network namespaces (link cuts and bandwidth drops too) or loopback (default: "
                         "namespaces where they can be made)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=FMNIST)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "chaos"))
    a = ap.parse_args()
    a.shards = a.shards or (a.peers + a.python_peers)
    if a.fault_free:
        a.fault_every = 0
    if not os.path.isfile(os.path.join(a.build, "peer", "rumor-peer")):
        sys.exit(f"{a.build}/peer/rumor-peer not found: build first (cmake --build {a.build})")
    if not os.path.isfile(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")):
        print(f"SKIPPED: Fashion-MNIST is not installed in {a.data} (apt-get install dataset-fashion-mnist)")
        sys.exit(77)
    if a.python_peers:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("no torch for the Python peers (apt-get install python3-torch): rumor-peer only")
            a.python_peers = 0
        if not os.path.isdir(os.path.join(a.build, "python", "rumor")):
            sys.exit(f"{a.build}/python/rumor not found: build the rumor_python target")
    sys.path.insert(0, os.path.join(ROOT, "examples", "testbed"))
    from testbed import Testbed  # noqa: E402
    if a.net in ("auto", "netns"):
        why = Testbed.refusal()
        if why and a.net == "netns":
            sys.exit(f"--net netns: {why}")
        a.net = "loopback" if why else "netns"
        if why:
            print(f"network namespaces unavailable ({why}): loopback, without link cuts and bandwidth drops")
    if a.net == "netns":
        with Testbed(prefix=f"rtb-chaos{os.getpid()}") as tb:
            members, faults, hangs, wall = soak(a, tb)
            rc = report(a, members, faults, hangs, wall)
    else:
        members, faults, hangs, wall = soak(a)
        rc = report(a, members, faults, hangs, wall)
    sys.exit(rc)


if __name__ == "__main__":
    main()
