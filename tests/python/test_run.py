"""rumor-run (python/rumor/run.py, build/bin/rumor-run): what each peer is given, the exit code of
the swarm, dead peers, signals, Slurm's variables, and native and Python peers started by it.
Every run is bounded (subprocess timeouts and rumor-run's own --timeout) and killed on failure."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BINARY_DIR, RUMOR_PEER

RUMOR_RUN = os.path.join(BINARY_DIR, "bin", "rumor-run")
sys.path.insert(0, os.path.join(BINARY_DIR, "python"))
from rumor import run as rr  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(RUMOR_RUN), reason=f"{RUMOR_RUN} is not built")


def launch(args, timeout=60, **kw):
    """rumor-run ARGS to the end; killed (with its peers: they are in its session) on timeout."""
    p = subprocess.Popen([RUMOR_RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"rumor-run did not end within {timeout} s:\n{out[-2000:]}\n{err[-3000:]}")
    return p.returncode, out, err


def script(tmp_path, body, name="s.py"):
    f = tmp_path / name
    f.write_text(textwrap.dedent(body))
    return str(f)


def free_port_pair():
    """A base port B with B and B+1 free on 127.0.0.1 (held while checked)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            if base >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
                return base
    raise AssertionError("no two consecutive free ports")


def lines_of(out, name):
    return [line[len(name) + 3:] for line in out.splitlines() if line.startswith(f"[{name}] ")]


def test_help_names_the_variables_and_the_exit_code():
    p = subprocess.run([RUMOR_RUN, "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    for word in ("--nproc", "--join", "RUMOR_SHARD", "RUMOR_LISTEN", "RUMOR_JOIN", "RUMOR_NAME", "--on-failure",
                 "Exit code", "srun"):
        assert word in p.stdout, word
    assert subprocess.run([RUMOR_RUN], capture_output=True, text=True, timeout=30).returncode == 2


def test_each_peer_gets_its_shard_name_address_and_the_founders_as_join_list(tmp_path):
    s = script(tmp_path, """
        import os, sys
        for k in ("RUMOR_SHARD", "RUMOR_NAME", "RUMOR_LISTEN", "RUMOR_JOIN", "RUMOR_MIN_PEERS", "RUMOR_RUN"):
            print(k, os.environ.get(k, "-"))
        print("to stderr", file=sys.stderr)
        import rumor
        print("peer", rumor.Peer().shard, flush=True)
    """)
    rc, out, err = launch(["--nproc", "3", s, "arg"], timeout=60)
    assert rc == 0, err
    env = {}
    for k in (1, 2, 3):
        got = dict(line.split(" ", 1) for line in lines_of(out, f"p{k}") if line.startswith("RUMOR_"))
        assert got["RUMOR_SHARD"] == f"{k}/3" and got["RUMOR_NAME"] == f"p{k}" and got["RUMOR_RUN"] == "1"
        assert got["RUMOR_MIN_PEERS"] == "3"  # a new swarm: the three start together
        assert f"peer ({k}, 3)" in lines_of(out, f"p{k}")  # rumor.Peer() reads them
        assert "to stderr" in lines_of(err, f"p{k}")  # each stream prefixed on its own
        env[k] = got
    listens = [env[k]["RUMOR_LISTEN"] for k in (1, 2, 3)]
    assert len(set(listens)) == 3 and all(x.startswith("127.0.0.1:") for x in listens)
    assert {env[k]["RUMOR_JOIN"] for k in (1, 2, 3)} == {f"{listens[0]},{listens[1]}"}
    for k in (1, 2, 3):
        assert f"p{k} finished (exit 0)" in err


def test_join_an_existing_swarm_takes_no_min_peers(tmp_path):
    s = script(tmp_path, "import os; print(os.environ['RUMOR_JOIN'], os.environ.get('RUMOR_MIN_PEERS', '-'))\n")
    rc, out, err = launch(["--join", "10.0.0.1:7000,10.0.0.2:7000", s], timeout=30)
    assert rc == 0 and lines_of(out, "p1") == ["10.0.0.1:7000,10.0.0.2:7000 -"], out + err


def test_exit_code_is_the_first_failure_and_the_others_finish(tmp_path):
    s = script(tmp_path, """
        import os, signal, time
        k = int(os.environ["RUMOR_SHARD"].split("/")[0])
        if k == 2:
            raise SystemExit(3)
        if k == 3:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(1.5)
        print("done")
    """)
    t0 = time.monotonic()
    rc, out, err = launch(["--nproc", "4", s], timeout=60)
    assert rc == 3, err  # p2 failed first
    assert "p2 failed (exit 3)" in err and "p3 failed (killed by SIGKILL)" in err
    assert lines_of(out, "p1") == ["done"] and lines_of(out, "p4") == ["done"]  # --on-failure continue
    assert "p1 finished (exit 0)" in err
    assert time.monotonic() - t0 < 40


def test_on_failure_stop_stops_the_others_as_torchrun_does(tmp_path):
    s = script(tmp_path, """
        import os, time
        if os.environ["RUMOR_NAME"] == "p1":
            time.sleep(0.3)
            raise SystemExit(5)
        time.sleep(120)
    """)
    t0 = time.monotonic()
    rc, out, err = launch(["--nproc", "3", "--on-failure", "stop", "--grace", "5", s], timeout=60)
    assert rc == 5, err
    assert "stopping the other 2 peer(s)" in err
    assert time.monotonic() - t0 < 30  # the sleepers were stopped, not waited for


def test_a_dead_peer_holding_its_pipe_open_is_not_waited_for(tmp_path):
    # The peer exits at once but leaves a grandchild holding its stdout: rumor-run watches the
    # process, not the pipe, and kills what the peer left behind.
    rc, out, err = launch(["--nproc", "2", "--", "/bin/sh", "-c", "sleep 60 & echo started; exit 7"], timeout=40)
    assert rc == 7 and "p1 failed (exit 7)" in err
    assert lines_of(out, "p1") == ["started"]


def test_timeout_stops_every_peer(tmp_path):
    s = script(tmp_path, "import time\ntime.sleep(120)\n")
    t0 = time.monotonic()
    rc, out, err = launch(["--nproc", "2", "--timeout", "3", "--grace", "2", s], timeout=60)
    assert rc == 124 and "--timeout 3 s passed" in err
    assert time.monotonic() - t0 < 25


def test_sigterm_is_a_graceful_leave_of_python_peers(tmp_path):
    pytest.importorskip("torch")
    s = script(tmp_path, """
        import sys, time, torch, rumor, rumor.torch
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        with rumor.Peer.from_env(log_level="info") as peer:
            opt = rumor.torch.GossipOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), peer, model=model)
            opt.join(timeout=30)
            print("training", flush=True)
            while True:
                opt.zero_grad()
                model(torch.randn(4, 8)).pow(2).mean().backward()
                opt.step()
                time.sleep(0.01)
    """)
    p = subprocess.Popen([RUMOR_RUN, "--nproc", "2", "--grace", "20", s], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        seen, end = set(), time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < end:
            line = p.stdout.readline()
            if not line:
                break
            if line.endswith("] training\n"):
                seen.add(line.split("]")[0])
        assert len(seen) == 2, "the peers did not start training"
        time.sleep(1.0)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=40)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 0, err[-3000:]
    assert "SIGTERM: the peers leave the swarm" in err
    for k in (1, 2):
        assert f"rumor: p{k}: SIGTERM: leaving the swarm" in err
        assert f"p{k} finished (exit 0)" in err
    assert "SIGKILL to" not in err


@pytest.mark.skipif(not os.path.exists(RUMOR_PEER), reason="rumor-peer is not built")
def test_native_peers_get_their_flags_and_form_one_swarm(tmp_path):
    rc, out, err = launch(["--nproc", "3", "--metrics-dir", str(tmp_path), "--timeout", "60", "--", "rumor-peer",
                           "--data", "synthetic", "--steps", "150", "--settle", "0.5"], timeout=90)
    assert rc == 0, err[-3000:]
    for k in (1, 2, 3):
        rows = [json.loads(x) for x in (tmp_path / f"p{k}.jsonl").read_text().splitlines()]
        done = [r for r in rows if r["event"] == "done"]
        assert done and done[0]["steps"] == 150
        assert max(r["peers"] for r in rows if r["event"] == "eval") == 3
        log = "\n".join(lines_of(err, f"p{k}"))
        assert f"shard {k}/3" in log and f"[p{k}]" in log  # --shard and --name reached rumor-peer


def test_slurm_variables_number_the_peers_across_tasks(monkeypatch):
    monkeypatch.setattr(rr, "_ipv4", lambda n: {"n1": "10.0.0.1", "n2": "10.0.0.2"}[n])
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "n[1-2]",
           "SLURMD_NODENAME": "n2"}
    peers = rr.plan(rr.parse(["--nproc", "2", "--port", "7100", "x.py"]), env)
    assert [(p["k"], p["n"], p["name"], p["listen"]) for p in peers] == [
        (3, 4, "p3", "10.0.0.2:7100"), (4, 4, "p4", "10.0.0.2:7101")]
    assert peers[0]["join"] == ["10.0.0.1:7100", "10.0.0.2:7100"] and peers[0]["min_peers"] == 4
    joiner = rr.plan(rr.parse(["--join", "10.0.0.9:7000", "x.py"]), env)
    assert joiner[0]["join"] == ["10.0.0.9:7000"] and joiner[0]["min_peers"] is None
    assert rr.expand_hostlist("gpu[01-03,7],cpu1,x[1-2]y") == ["gpu01", "gpu02", "gpu03", "gpu7", "cpu1", "x1y", "x2y"]
    one = rr.plan(rr.parse(["--host", "127.0.0.1", "--port", "7000", "x.py"]),
                  dict(env, SLURM_STEP_NODELIST="n1", SLURMD_NODENAME="n1", SLURM_LOCALID="1"))
    assert one[0]["listen"] == "127.0.0.1:7001" and one[0]["join"] == ["127.0.0.1:7000", "127.0.0.1:7001"]


@pytest.mark.skipif(not os.path.exists(RUMOR_PEER), reason="rumor-peer is not built")
def test_two_srun_tasks_on_one_node_form_one_swarm_of_native_peers(tmp_path):
    # What `srun --ntasks 2 rumor-run -- rumor-peer ...` does on one node, with Slurm's task
    # variables set by hand: each task's launcher computes its shard, port and the founders.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    if base > 65000:
        base -= 1000
    procs = []
    for task in (0, 1):
        env = dict(os.environ, SLURM_PROCID=str(task), SLURM_NTASKS="2", SLURM_LOCALID=str(task),
                   SLURM_STEP_NODELIST="localhost", SLURMD_NODENAME="localhost")
        procs.append(subprocess.Popen([RUMOR_RUN, "--host", "127.0.0.1", "--port", str(base), "--timeout", "60",
                                       "--metrics-dir", str(tmp_path), "--", "rumor-peer", "--data", "synthetic",
                                       "--steps", "100", "--settle", "0.5"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True))
    try:
        results = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    for k in (1, 2):
        rows = [json.loads(x) for x in (tmp_path / f"p{k}.jsonl").read_text().splitlines()]
        assert [r for r in rows if r["event"] == "done"][0]["steps"] == 100
        assert max(r["peers"] for r in rows if r["event"] == "eval") == 2
    assert f"join list 127.0.0.1:{base},127.0.0.1:{base + 1}" in results[0][1]


def test_metrics_port_gives_each_peer_its_endpoint(tmp_path):
    base = free_port_pair()
    s = script(tmp_path, """
        import os, urllib.request
        import rumor
        p = rumor.Peer()
        p.bind("raw:test/p8/f32", 8)
        print("endpoint", os.environ.get("RUMOR_METRICS_LISTEN"), p.metrics_address, flush=True)
        body = urllib.request.urlopen("http://" + p.metrics_address + "/metrics", timeout=10).read().decode()
        print("series", "rumor_steps_total" in body, flush=True)
        p.close(settle=False)
    """)
    rc, out, err = launch(["--nproc", "2", "--metrics-port", str(base), s], timeout=60)
    assert rc == 0, err
    for k in (1, 2):
        line = [x for x in lines_of(out, f"p{k}") if x.startswith("endpoint ")][0]
        _, env, actual = line.split()
        assert env == actual == f"127.0.0.1:{base + k - 1}", line
        assert "series True" in lines_of(out, f"p{k}")
    assert f"metrics and swarm pages on 127.0.0.1:{base},127.0.0.1:{base + 1}" in err
