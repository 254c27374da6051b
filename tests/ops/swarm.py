"""A loopback swarm of rumor-peer processes for the tests of the HTTP endpoint (--metrics-listen):
started with port 0 everywhere (the real ports are read off the peers' logs), each with a
JSON-lines metrics file, and always killed on the way out (a with-block, also on SIGTERM from
ctest's timeout). Only 127.0.0.1."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

SKIP = 77  # ctest SKIP_RETURN_CODE


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers, r.read()


class Peer:
    def __init__(self, proc, name, log_path, metrics_path):
        self.proc, self.name, self.log_path, self.metrics_path = proc, name, log_path, metrics_path
        self.address = None  # gossip HOST:PORT (the `peer` label)
        self.metrics_address = None  # HOST:PORT of /metrics

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def lines(self):
        """The metrics file as parsed JSON objects (a line cut off at the end is left out)."""
        out = []
        with open(self.metrics_path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def unix_of(self, lines):
        """t -> unix seconds for this peer's lines (docs/metrics.md: the start line)."""
        start = next(x for x in lines if x["event"] == "start")
        base = start["unix_time"] - start["t_offset"]
        return lambda t: base + t


class Swarm:
    """N peers: the first starts the swarm, the others join it; all wait for N (--min-peers)."""

    def __init__(self, binary, workdir, n, args=(), metrics_listen=True):
        self.binary, self.workdir, self.n, self.args = binary, workdir, n, list(args)
        self.metrics_listen = metrics_listen
        self.peers = []

    def __enter__(self):
        self._old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest timeout: still clean up
        try:
            for i in range(self.n):
                self._start(i)
            deadline = time.time() + 30
            for p in self.peers:
                while p.address is None or (self.metrics_listen and p.metrics_address is None):
                    log = p.log()
                    m = re.search(r"listening on (\S+)", log)
                    if m:
                        p.address = m.group(1)
                    m = re.search(r"metrics on http://(\S+)/metrics", log)
                    if m:
                        p.metrics_address = m.group(1)
                    if p.proc.poll() is not None:
                        raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{log}")
                    if time.time() > deadline:
                        raise RuntimeError(f"{p.name} did not log its addresses in 30 s:\n{log}")
                    time.sleep(0.05)
            return self
        except BaseException:
            self.kill()
            raise

    def _start(self, i):
        name = f"p{i + 1}"
        log_path = os.path.join(self.workdir, f"{name}.log")
        metrics_path = os.path.join(self.workdir, f"{name}.jsonl")
        cmd = [self.binary, "--data", "synthetic", "--shard", f"{i + 1}/{self.n}", "--listen", "127.0.0.1:0",
               "--min-peers", str(self.n), "--metrics", metrics_path, "--name", name] + self.args
        if self.metrics_listen:
            cmd += ["--metrics-listen", "127.0.0.1:0"]
        if i > 0:
            first = self.peers[0]
            deadline = time.time() + 30
            while first.address is None:
                m = re.search(r"listening on (\S+)", first.log())
                if m:
                    first.address = m.group(1)
                elif time.time() > deadline or first.proc.poll() is not None:
                    raise RuntimeError(f"p1 did not start:\n{first.log()}")
                else:
                    time.sleep(0.05)
            cmd += ["--join", first.address]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.peers.append(Peer(proc, name, log_path, metrics_path))

    def wait(self, timeout):
        """Waits for every peer to exit; returns their exit codes (None: still running at the deadline)."""
        deadline = time.time() + timeout
        for p in self.peers:
            try:
                p.proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        return [p.proc.poll() for p in self.peers]

    def kill(self):
        for p in self.peers:
            if p.proc.poll() is None:
                p.proc.kill()
        for p in self.peers:
            try:
                p.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __exit__(self, *exc):
        self.kill()
        signal.signal(signal.SIGTERM, self._old)
        return False
