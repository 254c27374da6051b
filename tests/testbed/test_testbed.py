#!/usr/bin/python3
"""The network testbed's tests (docs/testbed.md), one ctest entry per case:

  test_testbed.py shaping BUILD   the throughput between two namespaces shaped to 50 Mbit is
                                  within 15% of it (a Python TCP sender and receiver);
  test_testbed.py cpu BUILD       a rumor-peer capped at 0.4 of a core trains at 0.4 x the
                                  samples/s of an uncapped one scaled to a whole core (by its
                                  CPU time over wall time), within 20% (medians of 3 each,
                                  interleaved, on synthetic data so loading costs nothing);
  test_testbed.py swarm BUILD     a 2-peer rumor-peer swarm from a scenario file trains across
                                  namespaces through run.sh and leaves no namespace, link or
                                  cgroup; a run stopped by SIGTERM mid-training leaves nothing.
  test_testbed.py python BUILD    2 Rumor Python peers (run.sh --peer-cmd python: rumor.torch on
                                  Fashion-MNIST, the scenario's recipe) train across namespaces,
                                  exchange over the shaped link, and leave nothing behind; the
                                  summary's times are from launch (torch's import included).
  test_testbed.py calibrate BUILD run.sh --calibrate on two classes (0.5 and 0.25 of a core):
                                  each class gets a step CPU that rumor-sim takes, each peer
                                  used its cap while stepping (the cap held), nothing is left.
  test_testbed.py defaults BUILD  (no testbed needed) a scenario that leaves a loop knob unset
                                  gives the Python peers rumor-peer's default for it, as
                                  `rumor-peer --help` prints it (--local-steps auto, ...).

Exit 77 (ctest's SKIP_RETURN_CODE) with the reason where a testbed cannot be built here.
"""
import json
import re
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "testbed"))
import testbed as T  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def root_links():
    r = subprocess.run(["ip", "-o", "link"], stdout=subprocess.PIPE, text=True)
    return sorted(line.split(":")[1].strip() for line in r.stdout.splitlines())


def check_nothing_left(prefix, links_before):
    left = T.leftovers(prefix)
    if left:
        fail(f"left behind: {left}")
    links = root_links()
    if links != links_before:
        fail(f"the root namespace's links changed: {links_before} -> {links}")
    print(f"nothing of {prefix} left; root namespace links unchanged ({len(links)})")


def shaping(_build):
    rate_bit = 50e6
    prefix = f"rtb-shape-{os.getpid()}"
    before = root_links()
    script = os.path.join(HERE, "throughput.py")
    results = []
    with T.Testbed(prefix) as tb:
        tb.add_peer(0, rate_bit / 8, None)
        tb.add_peer(1, rate_bit / 8, None)
        for direction in ((0, 1), (1, 0)):
            src, dst = direction
            r = tb.start(dst, ["/usr/bin/python3", script, "recv", "9000", "3"], stdout=subprocess.PIPE)
            time.sleep(0.3)
            s = tb.start(src, ["/usr/bin/python3", script, "send", tb.addr(dst), "9000", "3"])
            out, _ = r.communicate(timeout=30)
            s.wait(timeout=30)
            got = float(out.decode().strip() or 0) * 8
            print(f"p{src} -> p{dst}: {got / 1e6:.2f} Mbit/s of TCP payload, set {rate_bit / 1e6:.0f} Mbit/s "
                  f"({(got / rate_bit - 1) * 100:+.1f}%)")
            results.append(got)
    check_nothing_left(prefix, before)
    for got in results:
        if abs(got / rate_bit - 1) > 0.15:
            fail(f"throughput {got / 1e6:.2f} Mbit/s is not within 15% of {rate_bit / 1e6:.0f} Mbit/s")
    print("PASS")


def peer_rate(tb, k, build, out_dir, tag):
    """(samples/s, the share of a core the process got: its CPU time over its wall time)."""
    metrics = os.path.join(out_dir, f"{tag}.jsonl")
    argv = [os.path.join(build, "peer", "rumor-peer"), "--listen", f"{tb.addr(k)}:7000", "--data", "synthetic",
            "--model", "mlp:256,128", "--duration", "2", "--settle", "0", "--eval-every", "100000",
            "--metrics", metrics]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    rc, _, err = tb.run(k, argv, timeout=60)  # nsenter execs rumor-peer: it is our child
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        fail(f"rumor-peer exited {rc}: {err[-2000:]}")
    done = [r for r in T.read_metrics(metrics) if r.get("event") == "done"]
    if not done:
        fail(f"no done line in {metrics}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done[-1]["samples_per_s"], cpu / wall


def cpu(build):
    """The uncapped peer's rate is scaled to a whole core by the share of a core it got (its CPU
    time over its wall time): on a machine shared with other work an uncapped process gets
    less than a core, and the cap is a share of a whole core."""
    share = 0.4
    prefix = f"rtb-cpu-{os.getpid()}"
    before = root_links()
    free, capped = [], []
    with tempfile.TemporaryDirectory() as d, T.Testbed(prefix) as tb:
        tb.add_peer(0, 125e6, None)
        tb.add_peer(1, 125e6, share)
        for i in range(3):
            rate, got = peer_rate(tb, 0, build, d, f"free{i}")
            free.append(rate / max(got, 1e-3))
            c_rate, c_got = peer_rate(tb, 1, build, d, f"capped{i}")
            capped.append(c_rate)
            print(f"round {i}: uncapped {rate:.0f} samples/s on {got:.2f} of a core ({free[-1]:.0f} per core); "
                  f"capped at {share}: {c_rate:.0f} samples/s on {c_got:.2f} of a core")
    check_nothing_left(prefix, before)
    ratio = statistics.median(capped) / statistics.median(free)
    print(f"median capped / uncapped-per-core {ratio:.3f}, expected {share} ({(ratio / share - 1) * 100:+.1f}%)")
    if abs(ratio / share - 1) > 0.20:
        fail(f"capped/uncapped = {ratio:.3f} is not within 20% of the share {share}")
    print("PASS")


SCENARIO = """# tests/testbed/test_testbed.py swarm: two peers, 50 Mbit, half a core each
[run]
seed = 3
peers = 2
min_peers = 2
settle = 2
[workload]
data = synthetic
model = mlp:64
epochs = 10
[gossip]
local_steps = 2
[class.peer]
count = 2
bandwidth = 50Mbit
cpu = 0.5
"""


RUN_SH = os.path.join(ROOT, "examples", "testbed", "run.sh")


def run_scenario_text(d, text, build, prefix, timeout, *more):
    """Write `text` as d/two.ini and run run.sh on it into d/out under `prefix`, with --timeout
    `timeout` and the flags `more`; prints its output. Returns (the completed run, the scenario
    file, the output folder)."""
    scn = os.path.join(d, "two.ini")
    with open(scn, "w") as f:
        f.write(text)
    out = os.path.join(d, "out")
    t0 = time.time()
    r = subprocess.run([RUN_SH, scn, "--out", out, "--build", build, "--prefix", prefix, "--timeout", str(timeout)]
                       + list(more), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout + 60)
    print(r.stdout)
    print(f"run.sh took {time.time() - t0:.1f} s")
    return r, scn, out


def swarm(build):
    before = root_links()
    with tempfile.TemporaryDirectory() as d:
        prefix = f"rtb-swarm-{os.getpid()}"
        r, scn, out = run_scenario_text(d, SCENARIO, build, prefix, 60, "--target", "0.5")
        if r.returncode != 0:
            fail(f"run.sh exited {r.returncode}")
        check_nothing_left(prefix, before)
        summary = json.load(open(os.path.join(out, "summary.json")))
        for p in summary["peers"]:
            if not p["done"]:
                fail(f"{p['id']} did not finish")
            if not p["bytes_sent"] or p["bytes_sent"] < 4 * 4 * 64 * 64:
                fail(f"{p['id']} sent {p['bytes_sent']} bytes: no exchange crossed the namespaces")
            if p["test_acc"] is None or p["test_acc"] < 0.5:
                fail(f"{p['id']} ended at accuracy {p['test_acc']}: it did not train")
            if not p.get("cpu_s") or p["cpu_s"] <= 0:
                fail(f"{p['id']}: summary.json has no CPU time of the process ({p.get('cpu_s')})")
        # The peers really were in their namespaces: each log names its own address.
        for k in range(2):
            log = open(os.path.join(out, f"p{k}.log")).read()
            if f"listening on 10.213.7.{10 + k}:7000" not in log:
                fail(f"p{k}.log does not show it listening on 10.213.7.{10 + k}:7000")
        # A run stopped by SIGTERM mid-way tears down too.
        prefix2 = f"rtb-stop-{os.getpid()}"
        p = subprocess.Popen([RUN_SH, scn, "--out", os.path.join(d, "out2"), "--build", build, "--prefix", prefix2,
                              "--timeout", "60", "--set", "workload.epochs=100000"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not T.leftovers(prefix2):
            time.sleep(0.1)
        time.sleep(2)
        if not T.leftovers(prefix2) or p.poll() is not None:
            p.kill()
            fail(f"the second run is not running with its namespaces: {p.communicate()[0]}")
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("run.sh did not stop within 30 s of SIGTERM")
        print(f"SIGTERM: run.sh exited {p.returncode}: {p.communicate()[0][-300:]}")
        check_nothing_left(prefix2, before)
    print("PASS")


PY_SCENARIO = """# tests/testbed/test_testbed.py python: two Rumor Python peers, 100 Mbit, 0.6 of a core each
[run]
seed = 2
peers = 2
min_peers = 2
settle = 1
[workload]
data = /usr/share/datasets/fashion-mnist
model = mlp:256,128
steps = 150
[output]
eval_every = 75
[gossip]
local_steps = 4
codec = fp16
[class.peer]
count = 2
bandwidth = 100Mbit
cpu = 0.6
"""


def python(build):
    if not os.path.isdir(os.path.join(build, "python", "rumor")):
        print(f"SKIPPED: the Python module is not built ({build}/python/rumor)")
        sys.exit(T.SKIP)
    r = subprocess.run(["/usr/bin/python3", "-c", "import torch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        print("SKIPPED: no torch for /usr/bin/python3 (apt-get install python3-torch)")
        sys.exit(T.SKIP)
    if not os.path.exists("/usr/share/datasets/fashion-mnist"):
        print("SKIPPED: no Fashion-MNIST (apt-get install dataset-fashion-mnist)")
        sys.exit(T.SKIP)
    before = root_links()
    with tempfile.TemporaryDirectory() as d:
        prefix = f"rtb-py-{os.getpid()}"
        r, _scn, out = run_scenario_text(d, PY_SCENARIO, build, prefix, 100, "--peer-cmd", "python", "--target", "0.7")
        for k in range(2):
            print(f"--- p{k}.log (end)\n" + open(os.path.join(out, f"p{k}.log")).read()[-1500:])
        if r.returncode != 0:
            fail(f"run.sh --peer-cmd python exited {r.returncode}")
        check_nothing_left(prefix, before)
        summary = json.load(open(os.path.join(out, "summary.json")))
        model_bytes = 235146 * 2  # one fp16 snapshot of mlp:256,128
        for p in summary["peers"]:
            if not p["done"] or p["steps"] != 150:
                fail(f"{p['id']} did not finish its 150 steps: done {p['done']}, steps {p['steps']}")
            if not p["bytes_sent"] or p["bytes_sent"] < 4 * model_bytes:
                fail(f"{p['id']} sent {p['bytes_sent']} bytes: fewer than 4 fp16 snapshots crossed the namespaces")
            if p["test_acc"] is None or p["test_acc"] < 0.7:
                fail(f"{p['id']} ended at accuracy {p['test_acc']}: it did not train")
        # p0 evaluated during training (as DDP's rank 0), p1 only at the end; the times are from
        # launch, so p0's first evaluation comes after torch's import and the data's loading
        evals = summary["peers"][0]["evals"]
        if len(evals) < 3:
            fail(f"p0 evaluated {len(evals)} times: expected at the start, at step 75 and at the end")
        if not 0.5 < evals[0][0] < summary["wall_s"]:
            fail(f"p0's first evaluation at {evals[0][0]} s from launch: not after the start of the process")
        for k in range(2):
            log = open(os.path.join(out, f"p{k}.log")).read()
            if f"listening on 10.213.7.{10 + k}:7000" not in log:
                fail(f"p{k}.log does not show it listening on 10.213.7.{10 + k}:7000")
    print("PASS")


CAL_SCENARIO = """# tests/testbed/test_testbed.py calibrate: two classes of CPU share
[run]
seed = 4
[workload]
data = synthetic
model = mlp:256,128
epochs = 10
[class.fast]
count = 1
cpu = 0.5
[class.slow]
count = 1
cpu = 0.25
"""


def calibrate(build):
    """run.sh --calibrate: every peer alone under its class's cap, a short and a long run; the
    fragment gives each class a step CPU that rumor-sim takes, each peer used its cap (no more:
    the cap held; and not far less: the peer stepped all the time), and nothing is left."""
    before = root_links()
    with tempfile.TemporaryDirectory() as d:
        prefix = f"rtb-cal-{os.getpid()}"
        r, scn, out = run_scenario_text(d, CAL_SCENARIO, build, prefix, 90, "--calibrate", "--calibrate-steps",
                                        "200,2000")
        if r.returncode != 0:
            fail(f"run.sh --calibrate exited {r.returncode}")
        check_nothing_left(prefix, before)
        frag = open(os.path.join(out, "testbed_calibration.ini")).read()
        steps = {}
        for name in ("fast", "slow"):
            m = re.search(rf"^\[class\.{name}\]\nstep_time = ([0-9.e-]+)$", frag, re.M)
            if not m:
                fail(f"the fragment has no step_time for class {name}:\n{frag}")
            steps[name] = float(m.group(1))
            if not 1e-6 < steps[name] < 0.1:
                fail(f"class {name}'s step CPU {steps[name]} s is not a step of mlp:256,128")
        rows = json.load(open(os.path.join(out, "testbed_calibration.json")))["peers"]
        for row in rows:
            c0, c1, _ = row["cpu_s"]
            if not c1 > c0:
                fail(f"{row['id']}: the long run's CPU {c1} s is not above the short run's {c0} s")
            if not 0.3 < row["cap_used"] < 1.25:
                fail(f"{row['id']} used {row['cap_used']:.2f} of its {row['cpu']} core while stepping: the cap did "
                     "not hold, or the peer did not step")
        # rumor-sim takes the fragment after the scenario (a class key wins over [compute])
        with open(os.path.join(d, "predict.ini"), "w") as f:
            f.write(f"include = {scn}\ninclude = {os.path.join(out, 'testbed_calibration.ini')}\n"
                    "[workload]\nepochs = 1\n")
        sim = subprocess.run([os.path.join(build, "sim", "rumor-sim"), os.path.join(d, "predict.ini"), "--out",
                              os.path.join(d, "sim")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=120)
        if sim.returncode != 0:
            fail(f"rumor-sim did not take the fragment: {sim.stdout[-500:]}")
        print(f"step CPU: fast {steps['fast'] * 1e3:.3f} ms, slow {steps['slow'] * 1e3:.3f} ms; rumor-sim ran on it")
    print("PASS")


def defaults(build):
    """The worker's flags for a plan that sets none of the loop knobs: each must be rumor-peer's
    default. (Once --local-steps auto became rumor-peer's default, a stale `1` here ran the
    Python peers at H = 1 while rumor-sim, given the same file, chose H itself.)"""
    text = subprocess.run([os.path.join(build, "peer", "rumor-peer"), "--help"], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    peer_default = dict(re.findall(r"^\s+(--[a-z-]+) \S*?=(\S+)", text, re.M))
    argv = T.torch_worker_argv("worker.py", ["--shard", "1/4"], "mlp", "m.jsonl", None)
    given = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in T.TORCH_WORKER_DEFAULTS}
    checked = 0
    for key in T.TORCH_WORKER_DEFAULTS:
        if key not in peer_default:
            fail(f"{key}: rumor-peer --help shows no default for it")
        if given.get(key) != peer_default[key]:
            fail(f"{key}: the Python peers get {given.get(key)!r} where the scenario leaves it unset, rumor-peer's "
                 f"default is {peer_default[key]!r}")
        checked += 1
    print(f"{checked} loop knobs: the Python peers get rumor-peer's defaults ({', '.join(f'{k} {v}' for k, v in given.items())})")
    print("PASS")


def main():
    cases = {"shaping": shaping, "cpu": cpu, "swarm": swarm, "python": python, "calibrate": calibrate, "defaults": defaults}
    if len(sys.argv) != 3 or sys.argv[1] not in cases:
        print(__doc__)
        return 2
    if sys.argv[1] == "defaults":  # no namespaces needed
        defaults(os.path.abspath(sys.argv[2]))
        return 0
    why = T.Testbed.refusal()
    if why:
        print(f"SKIPPED: cannot build a testbed here: {why}")
        return T.SKIP
    cases[sys.argv[1]](os.path.abspath(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
