"""Shared helpers of the Python module's tests: every test has a deadline (SIGALRM: no test
hangs the suite), peers run in threads (a peer's blocking waits release the GIL, so peers in one
process make progress together) or in subprocesses (for kill -9 and hand-over tests)."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY_DIR = os.environ.get("RUMOR_BINARY_DIR", os.path.join(HERE, "..", "..", "build"))
RUMOR_PEER = os.path.join(BINARY_DIR, "peer", "rumor-peer")
TEST_TIMEOUT_S = 90


class TestTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def deadline():
    def fire(signum, frame):
        raise TestTimeout(f"test exceeded {TEST_TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(TEST_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def run_threads(fns, timeout):
    """Runs each fn in its own thread; re-raises the first exception; fails after `timeout` s."""
    errors = []
    results = [None] * len(fns)

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, f), daemon=True) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise AssertionError(f"peer threads still running after {timeout} s")
    if errors:
        raise errors[0]
    return results


def rel_distance(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), np.linalg.norm(b), 1e-30))


class Child:
    """A Python peer in a subprocess (tests/python/peer_child.py): prints "listening on
    HOST:PORT" when bound; killed at the end of the test whatever happened."""

    def __init__(self, *args, log=None):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p.endswith("python")] +
                                            [env.get("PYTHONPATH", "")])
        self.log = log
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "peer_child.py"), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=open(log, "w") if log else subprocess.DEVNULL,
                                     text=True, env=env)
        self.address = None

    def listen_address(self, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.address = line.split()[2]
                return self.address
        raise AssertionError("the child peer did not start" + (f" (log {self.log})" if self.log else ""))

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def children():
    made = []

    def make(*args, log=None):
        c = Child(*args, log=log)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
