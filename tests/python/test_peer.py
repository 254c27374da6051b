"""rumor.Peer on loopback with numpy buffers (no torch): averaging, mixing with rumor-peer,
crashes, joins, shutdown, and misuse. Each peer runs in its own thread or process."""
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rumor
from rumor import _rumor
from conftest import RUMOR_PEER, rel_distance, run_threads


def fingerprint(n):
    return f"raw:test/p{n}/f32"


class RawPeer:
    """A peer whose "training" is `update` (none: pure averaging), applied like rumor.torch does:
    the swarm's change (begin_step), the local update, copy into the buffer, end_step."""

    def __init__(self, n, seed, join=(), fp=None, **kw):
        kw.setdefault("exchange_timeout", 1.0)
        self.peer = rumor.Peer(join=list(join), seed=seed, **kw)
        self.flat = self.peer.bind(fp or fingerprint(n), n)
        self.flat[:] = np.random.default_rng(seed).normal(size=n).astype(np.float32)
        self.init = self.flat.copy()
        self.live = self.flat.copy()
        self.steps = 0

    @property
    def address(self):
        return self.peer.address

    def join(self, timeout=10):
        step = self.peer.join(timeout)
        self.live = self.flat.copy()
        self.peer.model_copied()
        return step

    def step(self, update=None):
        d = self.peer.begin_step()
        if d is not None:
            self.live += d
        if update is not None:
            self.live += update
        self.flat[:] = self.live
        d = self.peer.end_step()
        if d is not None:
            self.live += d
        self.steps += 1

    def serve(self, seconds):
        d = self.peer.serve(seconds)
        if d is not None:
            self.live += d


def test_four_python_peers_average_to_the_mean():
    n = 1000
    # Started together (min_peers): every peer keeps its own values, no state transfer.
    peers = [RawPeer(n, 11, min_peers=4)]
    for i in range(1, 4):
        peers.append(RawPeer(n, 11 + i, join=[peers[0].address], min_peers=4))
    mean = np.mean([p.init.astype(np.float64) for p in peers], axis=0)
    done = [False]

    def converged():
        lives = [p.live.copy() for p in peers]
        return all(rel_distance(a, lives[0]) < 1e-6 for a in lives)

    def run(p):
        p.join(10)
        end = time.monotonic() + 40
        while not done[0] and time.monotonic() < end:
            p.step()
            time.sleep(0.002)

    import threading
    t = threading.Thread(target=lambda: run_threads([lambda p=p: run(p) for p in peers], 60), daemon=True)
    t.start()
    end = time.monotonic() + 40
    while time.monotonic() < end and not converged():
        time.sleep(0.1)
    done[0] = True
    t.join(30)
    for i, p in enumerate(peers):
        d = rel_distance(p.live, mean)
        assert d < 1e-5, f"peer {i}: relative distance {d:.3g} to the mean of the initial values"
        assert p.peer.stats()["exchanges"] > 0
    for p in peers:
        p.peer.close(settle=False)


def test_python_and_cpp_peer_average_exactly(tmp_path):
    if not os.path.exists(RUMOR_PEER):
        pytest.fail(f"{RUMOR_PEER} not built")
    fp = _rumor.dense_fingerprint("logreg", 64, 10)
    assert fp == "logreg:64-10/ce/p650/f32"
    out = tmp_path / "cpp.params"
    py = RawPeer(650, 5, fp=fp)
    log = open(tmp_path / "cpp.log", "w")
    cpp = subprocess.Popen([RUMOR_PEER, "--data", "synthetic", "--model", "logreg", "--lr", "0", "--duration", "3",
                            "--min-peers", "2", "--init-seed", "7", "--join", py.address, "--save-params", str(out),
                            "--exchange-timeout", "1", "--settle-max", "3"], stderr=log, stdout=subprocess.DEVNULL)
    try:
        py.join(10)
        cpp_init = _rumor.dense_init("logreg", 64, 10, 7)
        mean = (cpp_init.astype(np.float64) + py.init.astype(np.float64)) / 2
        end = time.monotonic() + 40
        while cpp.poll() is None and time.monotonic() < end:
            py.step()
            time.sleep(0.002)
        assert cpp.wait(10) == 0, open(tmp_path / "cpp.log").read()[-3000:]
    finally:
        if cpp.poll() is None:
            cpp.kill()
            cpp.wait()
    theirs = np.fromfile(out, dtype="<f4")
    assert theirs.size == 650
    assert py.peer.stats()["exchanges"] > 0
    assert rel_distance(theirs, mean) < 1e-6, rel_distance(theirs, mean)
    assert rel_distance(py.live, mean) < 1e-6, rel_distance(py.live, mean)
    py.peer.close(settle=False)


def test_a_python_peer_killed_with_sigkill_does_not_stall_the_others(children, tmp_path):
    n = 200
    a = RawPeer(n, 21, staleness=3, wait_timeout=30)
    child = children("raw", a.address, 3, 0, "-", n, 24, log=tmp_path / "child.log")
    child.listen_address()
    others = [a] + [RawPeer(n, 22 + i, join=[a.address], staleness=3, wait_timeout=30) for i in range(2)]
    killed = [None]

    def run(p, first):
        p.join(10)
        while p.peer.stats()["peers"] < 4:
            p.step()
            time.sleep(0.003)
        for _ in range(30):
            p.step()
            time.sleep(0.003)
        if first:
            child.kill(signal.SIGKILL)
            killed[0] = time.monotonic()
        while killed[0] is None:
            time.sleep(0.01)
        for _ in range(150):
            p.step()
            time.sleep(0.003)
        return time.monotonic() - killed[0]

    took = run_threads([lambda p=p, i=i: run(p, i == 0) for i, p in enumerate(others)], 75)
    assert max(took) < 25, f"150 steps after the kill took {max(took):.1f} s"
    # Every view first, then the closes: a closing peer leaves, and the others (answering in the
    # background between steps) would see it go.
    alive = [p.peer.stats()["alive"] for p in others]
    assert alive == [3, 3, 3], f"the killed peer should be suspect or dead in every view: alive {alive}"
    for p in others:
        p.peer.close(settle=False)


def test_a_peer_busy_between_steps_still_answers_the_swarm():
    """A long evaluation (here: 3 s of pure Python holding the GIL) between two steps: the peer
    answers exchanges and probes in the background, so its neighbour's exchanges with it do not
    time out (exchange_timeout 1 s), it is not suspected, and what was mixed in meanwhile
    reaches the live parameters at the next step."""
    n = 300
    a = RawPeer(n, 41, wait_timeout=30)
    b = RawPeer(n, 42, join=[a.address], wait_timeout=30)
    stop = [False]

    def run_a():
        a.join(10)
        drift = np.full(n, 1e-3, dtype=np.float32)  # a trains: its model moves away from b's
        while not stop[0]:
            a.step(drift)
            time.sleep(0.002)

    t = threading.Thread(target=run_a, daemon=True)
    t.start()
    try:
        b.join(10)
        for _ in range(20):
            b.step()
            time.sleep(0.002)
        before = a.peer.stats()
        answered_before = b.peer.stats()["answered"]
        end = time.monotonic() + 3.0
        x = 0
        while time.monotonic() < end:  # the "evaluation": never releases the GIL for long
            x += 1
        after = a.peer.stats()
        mixed = b.peer.begin_step()  # the next step: what was mixed in while busy
    finally:
        stop[0] = True
        t.join(10)
    assert after["failed"] == before["failed"], "exchanges with the busy peer timed out"
    assert after["alive"] == 2, "the busy peer was suspected"
    assert b.peer.stats()["answered"] > answered_before + 10, "the busy peer answered nothing in 3 s"
    assert mixed is not None and np.abs(mixed).max() > 0
    a.peer.close(settle=False)
    b.peer.close(settle=False)


def test_serve_keeps_going_while_a_peer_is_behind_up_to_max_seconds():
    """serve(seconds, max_seconds): the first peer to finish keeps averaging while another is
    still behind its clock (as rumor-peer's --settle-max), and stops once it caught up."""
    n = 100
    a = RawPeer(n, 51, min_peers=2, wait_timeout=30)
    b = RawPeer(n, 52, join=[a.address], min_peers=2, wait_timeout=30)
    took = [None, None]

    def run_a():
        a.join(10)
        for _ in range(10):
            a.step()
        t0 = time.monotonic()
        a.peer.serve(0.3)  # plain: b is behind, but 0.3 s it is
        took[0] = time.monotonic() - t0
        t0 = time.monotonic()
        a.peer.serve(0.3, max_seconds=20)  # until b has caught up with our 10 steps
        took[1] = time.monotonic() - t0

    def run_b():
        b.join(10)
        for _ in range(15):  # passes a's clock after about 2 s
            b.step()
            time.sleep(0.2)

    run_threads([run_a, run_b], 60)
    assert took[0] < 1.0, took
    assert 0.8 < took[1] < 10, took
    a.peer.close(settle=False)
    b.peer.close(settle=False)


def test_a_member_that_joined_and_has_not_stepped_yet_hands_its_model_to_a_joiner():
    """A script joins, then spends a while before its first step (loading its data): once it has
    copied the model out (model_copied(), which rumor.torch calls itself), the peer answers in
    the background, so a joiner through it is let in (the swarm has not trained: it keeps its
    own initialisation) instead of timing out; and an exchange the joiner starts mixes into the
    member's buffer, reaching its live parameters at its first begin_step(). Misplaced,
    model_copied() is refused."""
    n = 200
    a = RawPeer(n, 71, wait_timeout=30)
    assert a.join(10) == 0
    b = RawPeer(n, 72, join=[a.address], wait_timeout=30)
    t0 = time.monotonic()
    assert b.join(10) == 0  # a is "loading": it has not stepped, and answers from the background
    assert time.monotonic() - t0 < 5
    for _ in range(6):
        b.step(np.full(n, 0.01, dtype=np.float32))  # b trains; its exchanges mix into a's buffer
        time.sleep(0.01)
    deadline = time.monotonic() + 5
    while a.peer.stats()["answered"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert a.peer.stats()["answered"] > 0, "the member answered no exchange before its first step"
    moved = a.peer.begin_step()
    assert moved is not None and np.abs(moved).max() > 0, "the mixes did not reach the first step"
    with pytest.raises(RuntimeError, match="right after join"):
        a.peer.model_copied()  # mid-step: the buffer is the script's until end_step()
    a.flat[:] = a.live + moved
    a.peer.end_step()
    a.peer.close(settle=False)
    b.peer.close(settle=False)


def test_a_peer_that_closes_does_not_hold_back_one_still_training():
    """close() settles, and says in its digest that this peer has finished training: a peer still
    training with a staleness bound goes on stepping past its clock meanwhile instead of waiting
    for it until it has left (as with a finished rumor-peer)."""
    n = 100
    a = RawPeer(n, 61, min_peers=2, wait_timeout=30, staleness=2, settle=4, settle_max=4)
    b = RawPeer(n, 62, join=[a.address], min_peers=2, wait_timeout=30, staleness=2, settle=4, settle_max=4)
    when = {}

    def run_a():
        a.join(10)
        for _ in range(5):
            a.step()
        when["a_closing"] = time.monotonic()
        a.peer.close()  # settles for 4 s (nobody is behind it), then leaves
        when["a_left"] = time.monotonic()

    def run_b():
        b.join(10)
        for _ in range(5):
            b.step()
        while "a_closing" not in when:
            time.sleep(0.01)
        for _ in range(30):  # far past a's clock (5) + TAU (2)
            b.step()
        when["b_30"] = time.monotonic()

    run_threads([run_a, run_b], 60)
    # b made its 30 steps while a was still settling, not after a had left.
    assert when["b_30"] < when["a_left"], when
    assert when["b_30"] - when["a_closing"] < 3.0, when
    b.peer.close(settle=False)


def test_a_joiner_gets_the_swarm_state_before_its_first_step():
    n = 500
    a = RawPeer(n, 31)
    b = RawPeer(n, 32, join=[a.address])
    drift = np.full(n, 0.01, dtype=np.float32)
    trained = [0]

    def train(p):
        p.join(10)
        for _ in range(40):
            p.step(drift)
            time.sleep(0.002)
        trained[0] += 1
        p.serve(6.0)

    import threading
    t = threading.Thread(target=lambda: run_threads([lambda: train(a), lambda: train(b)], 40), daemon=True)
    t.start()
    end = time.monotonic() + 30
    while trained[0] < 2 and time.monotonic() < end:
        time.sleep(0.05)
    assert trained[0] == 2
    time.sleep(1.0)  # exchanges still in flight when training ended complete (or time out)
    c = RawPeer(n, 33, join=[a.address])
    step = c.join(10)
    assert step >= 40, f"the joiner took step {step}, expected the swarm's (>= 40)"
    assert c.peer.stats()["steps"] == step
    # The source's model: its buffer (A and B are inside serve(), which applies what was mixed
    # meanwhile to their live values only when it returns).
    d = min(rel_distance(c.live, a.flat), rel_distance(c.live, b.flat))
    assert d < 1e-7, f"the joiner should start from the swarm's model (relative distance {d:.3g})"
    assert rel_distance(c.live, c.init) > 0.5
    t.join(20)
    for p in (a, b, c):
        p.peer.close(settle=False)


def test_wrong_fingerprint_is_refused_with_the_difference():
    a = RawPeer(10, 41, fp="torch:w=2x5/p10/f32")
    c = RawPeer(10, 42, join=[a.address], fp="torch:w=5x2/p10/f32")
    import threading
    stop = [False]

    def serve():
        while not stop[0]:
            a.serve(0.05)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(rumor.FingerprintMismatch, match=r"parameter 0: ours w shape 5 x 2, theirs w shape 2 x 5"):
        c.join(8)
    assert time.monotonic() - t0 < 9
    stop[0] = True
    t.join(5)
    a.peer.close(settle=False)
    c.peer.close(settle=False)


def test_close_returns_within_5_s_with_a_peer_unreachable(children, tmp_path):
    n = 100
    a = RawPeer(n, 51)
    child = children("raw", a.address, "inf", 0, "-", n, 52, log=tmp_path / "child.log")
    child.listen_address()
    a.join(10)
    end = time.monotonic() + 15
    while a.peer.stats()["peers"] < 2 and time.monotonic() < end:
        a.step()
        time.sleep(0.005)
    assert a.peer.stats()["peers"] == 2
    child.kill(signal.SIGSTOP)  # alive to TCP, silent to the protocol
    for _ in range(20):
        a.step()
        time.sleep(0.005)
    t0 = time.monotonic()
    a.peer.close(timeout=5, settle=False)  # the leave alone is bounded by timeout
    took = time.monotonic() - t0
    child.kill(signal.SIGCONT)
    assert took < 5.5, f"close() took {took:.2f} s"


def test_a_join_address_that_never_answers_times_out():
    # Nothing listening: refused at once, retried until the timeout.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    p = RawPeer(10, 61, join=[dead])
    t0 = time.monotonic()
    with pytest.raises(rumor.JoinTimeout):
        p.join(2)
    assert time.monotonic() - t0 < 3.5
    p.peer.close(settle=False)
    # Listening, accepting (the kernel does), never speaking.
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    q = RawPeer(10, 62, join=["127.0.0.1:%d" % mute.getsockname()[1]])
    t0 = time.monotonic()
    with pytest.raises(rumor.JoinTimeout):
        q.join(2)
    assert time.monotonic() - t0 < 3.5
    t0 = time.monotonic()
    q.peer.close(timeout=5)
    assert time.monotonic() - t0 < 5.5
    mute.close()


def test_a_forked_child_cannot_use_the_parents_peer():
    p = RawPeer(10, 71)
    pid = os.fork()
    if pid == 0:  # the child: every call must raise ForkError, and exiting must not hang
        code = 0
        for call in (lambda: p.peer.stats(), lambda: p.peer.begin_step(), lambda: p.peer.close(settle=False)):
            try:
                call()
                code = 1
            except rumor.ForkError:
                pass
            except BaseException:
                code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert p.peer.stats()["steps"] == 0  # the parent's peer still works
    p.peer.close(settle=False)


def test_exit_without_close_is_clean(children):
    c = children("noclose", "-", "inf", 0, "-", 10, 81)
    c.listen_address()
    t0 = time.monotonic()
    assert c.proc.wait(10) == 0
    assert time.monotonic() - t0 < 6


def test_context_manager_and_misuse():
    with rumor.Peer() as p:
        flat = p.bind(fingerprint(4), 4)
        assert flat.dtype == np.float32 and flat.shape == (4,)
        flat[:] = [1, 2, 3, 4]
        assert np.array_equal(np.frombuffer(memoryview(p._node), dtype=np.float32), flat)  # zero-copy
        with pytest.raises(rumor.RumorError):
            p.bind(fingerprint(4), 4)
    assert p.closed
    with pytest.raises(rumor.PeerClosed):
        p.stats()
    assert flat[3] == 4  # arrays handed out stay valid after close
    with pytest.raises(ValueError):
        rumor.Peer(listen="localhost")
    with pytest.raises(ValueError):
        rumor.Peer(join=["127.0.0.1:0"])
    with pytest.raises(ValueError):
        rumor.Peer(codec="zip")
    with pytest.raises(ValueError):
        rumor.Peer(staleness=-1)
    with pytest.raises(ValueError):
        rumor.Peer(local_steps=0)
    with pytest.raises(rumor.RumorError):
        rumor.Peer().begin_step()  # nothing bound


def test_every_loop_knob_is_a_keyword_with_the_flags_default_and_checks():
    """rumor.Peer's settings come from the C++ table that rumor-peer's flags and rumor-sim's keys
    come from: the same names (a flag's, '-' -> '_'), defaults, parser and messages."""
    assert {"local_steps", "staleness", "codec", "mix_weight", "exchange_timeout", "min_peers", "settle",
            "settle_max", "robust", "probe_interval"} <= set(rumor.KNOBS)
    assert "epochs" not in rumor.KNOBS and "steps" not in rumor.KNOBS  # the user's loop decides when to stop
    for name, k in rumor.KNOBS.items():
        assert k["flag"] == "--" + name.replace("_", "-")
        if k["default"] != "auto":
            rumor.Peer(**{name: k["default"]})  # the default, in the flag's text form, is accepted
    with pytest.raises(ValueError, match=r"exchange_timeout: unknown time unit 'parsecs'"):
        rumor.Peer(exchange_timeout="5 parsecs")
    # Settings that do not combine are refused at once, with the same reason rumor-peer gives.
    with pytest.raises(ValueError, match=r"topk does not combine with fragments"):
        rumor.Peer(codec="topk", fragments=2)
    rumor.Peer(codec="int4", fragments=4, codec_partners=4)
    with pytest.raises(ValueError, match=r"staleness: expected a whole number of steps >= 0, or inf, got '1.5'"):
        rumor.Peer(staleness=1.5)
    with pytest.raises(ValueError, match=r"max_in_flight: '3' is out of range \(expected 1..2\)"):
        rumor.Peer(max_in_flight=3)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'local_step'"):
        rumor.Peer(local_step=2)
    # HOST:PORT through the one C++ parser: [IPv6] and names too.
    rumor.Peer(listen="[::1]:0")
    rumor.Peer(join=["localhost:7000", "[::1]:7001"])
    with pytest.raises(ValueError, match=r"bad join '\[::1\]': unterminated \[IPv6\]"):
        rumor.Peer(join=["[::1]"])
    # Python values in: bool, inf, durations with units; a bound peer runs with them.
    with rumor.Peer(local_steps=4, staleness=math.inf, robust=True, settle="250ms", exchange_timeout=2) as p:
        p.bind(fingerprint(4), 4)
        assert p.stats()["peers"] == 1


def test_a_swarm_wide_budget_stops_peers_of_different_speeds_together():
    """swarm_samples: each loop stops at peer.done, when the swarm as a whole has processed the
    budget (the counts travel in the digests): the fast peer does more steps, both stop at about
    the same time, and the swarm does not overshoot the budget by much."""
    n, budget = 50, 400
    a = RawPeer(n, 71, min_peers=2, swarm_samples=budget)
    b = RawPeer(n, 72, join=[a.address], min_peers=2, swarm_samples=budget)
    assert a.peer.swarm_target == budget and a.peer.swarm_progress is not None
    stopped = {}

    def run(p, name, pause):
        p.join(10)
        while not p.peer.done:
            p.step()
            time.sleep(pause)
        stopped[name] = time.monotonic()

    run_threads([lambda: run(a, "a", 0.002), lambda: run(b, "b", 0.008)], 60)
    assert a.peer.done and b.peer.done and a.peer.swarm_progress == 1.0
    assert budget <= a.steps + b.steps <= budget * 1.15, (a.steps, b.steps)
    assert a.steps > 2 * b.steps, (a.steps, b.steps)  # about 4x: it steps about 4x as fast
    assert abs(stopped["a"] - stopped["b"]) < 1.0, stopped
    for p in (a, b):
        p.peer.close(settle=False)


def test_a_swarm_wide_budget_in_epochs_needs_the_training_set_size():
    with pytest.raises(ValueError, match="train_set_size"):
        rumor.Peer(swarm_epochs=2)
    with pytest.raises(ValueError, match="swarm_epochs"):
        rumor.Peer(swarm_epochs=0, train_set_size=100)
    p = rumor.Peer(swarm_epochs=1.5, train_set_size=1001)
    assert p.swarm_target == 1502  # ceil(1.5 x 1001)
    with pytest.raises(ValueError, match="already has a swarm-wide budget"):
        p.set_swarm_budget(swarm_samples=7)
    p.close()


def test_a_peer_that_waited_long_for_a_slower_one_is_told_of_a_swarm_budget(capfd):
    """close() after training settles while a peer is still behind (up to settle_max); when that
    wait is long against the peer's own training and its budget is per peer, it warns that a
    swarm-wide budget (swarm_epochs=) shares the work by speed. The slow one waited for nobody."""
    n = 100
    a = RawPeer(n, 91, min_peers=2, wait_timeout=30, name="fast", settle_max=30)
    b = RawPeer(n, 92, join=[a.address], min_peers=2, wait_timeout=30, name="slow")
    took = [None]

    def run_a():
        a.join(10)
        for _ in range(20):
            a.step()
        t0 = time.monotonic()
        a.peer.close()  # settles until b has passed our 20 steps, about 4 s
        took[0] = time.monotonic() - t0

    def run_b():
        b.join(10)
        for _ in range(30):
            b.step()
            time.sleep(0.2)
        b.peer.close()

    run_threads([run_a, run_b], 60)
    assert 2.5 < took[0] < 20, took
    err = capfd.readouterr().err
    hints = [line for line in err.splitlines() if "settling waited" in line]
    assert len(hints) == 1, err
    assert "fast" in hints[0] and "swarm_epochs=" in hints[0], hints


def test_the_learning_rate_follows_the_peers_still_training(capfd):
    """lr_scale(): 1 while all the peers train; once two of three have left, the last one's
    factor is 1/3 (and it says so on stderr); lr_follows_peers=False keeps 1."""
    n = 50
    a = RawPeer(n, 81, min_peers=3, name="a")
    b = RawPeer(n, 82, join=[a.address], min_peers=3, name="b")
    c = RawPeer(n, 83, join=[a.address], min_peers=3, name="c")
    d = RawPeer(n, 84, join=[a.address], name="d", lr_follows_peers=False)
    scales = {}

    def train(p, k):
        p.join(10)
        for _ in range(k):
            p.step()
            time.sleep(0.005)

    run_threads([lambda: train(a, 20), lambda: train(b, 20), lambda: train(c, 20), lambda: train(d, 20)], 60)
    scales["together"] = c.peer.lr_scale()
    assert scales["together"] == 1.0
    a.peer.close(settle=False)
    b.peer.close(settle=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and c.peer.lr_scale() > 0.5:
        c.step()
        d.step()
        time.sleep(0.01)
    assert c.peer.lr_scale() == pytest.approx(2 / 4)  # c and d train, of the 4 seen
    assert d.peer.lr_scale() == 1.0  # lr_follows_peers=False
    d.peer.close(settle=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and c.peer.lr_scale() > 0.3:
        c.step()
        time.sleep(0.01)
    assert c.peer.lr_scale() == pytest.approx(1 / 4)
    assert "learning rate x0.25: 1 peer(s) training now, of the 4 seen" in capfd.readouterr().err
    c.peer.close(settle=False)
