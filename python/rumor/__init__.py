"""Rumor from Python: a training loop of yours gossips through a real Rumor peer.

A `Peer` is one member of a Rumor swarm, the same as a `rumor-peer` process: the C++ extension
(rumor._rumor) runs the transport on its own I/O thread and the gossip protocol (core::Gossip,
driven by core::PeerLoop) around a flat float32 buffer that it owns and exposes without a copy.
Your loop trains; rumor.torch copies the model's parameters into that buffer after every step
and applies what the swarm mixed into it at the next one (docs/python.md).

    peer = rumor.Peer(listen="127.0.0.1:0", join=["10.0.0.1:7000"], local_steps=8, staleness=4)
    opt = rumor.torch.GossipOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), peer, model=model)
    opt.join(timeout=60)
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    peer.close()

Threads: nothing here calls back into Python from the I/O thread; every blocking call has a
timeout and releases the GIL. A peer belongs to the process that made it: after os.fork() the
child gets ForkError from every call (the parent's sockets and threads are not the child's).
"""
import atexit
import math
import os
import threading
import weakref

try:
    from . import _rumor
except ImportError as e:  # pragma: no cover - a build or path problem, said plainly
    raise ImportError(
        "rumor: the compiled extension rumor._rumor is missing (" + str(e) + "). Build it with "
        "`cmake --build build --target rumor_python` and put build/python on PYTHONPATH.") from e

__all__ = ["Peer", "KNOBS", "RumorError", "FingerprintMismatch", "JoinTimeout", "ForkError", "PeerClosed", "WaitTimeout",
           "Diverged"]

# The staleness bound (or a join that never finished) held a step back longer than the peer's
# wait_timeout: a TimeoutError.
WaitTimeout = _rumor.WaitTimeout
# A step reported a non-finite loss (step(loss=...)): the peer stopped exchanging, as rumor-peer
# exits 1 when training diverges. A RuntimeError.
Diverged = _rumor.Diverged


class RumorError(RuntimeError):
    """Something went wrong with the peer (not a bug in your model)."""


class FingerprintMismatch(RumorError, ValueError):
    """The swarm trains a different model: parameters differ in name, shape or dtype."""


class JoinTimeout(RumorError, TimeoutError):
    """No member of the swarm answered (or delivered its model) within the timeout."""


class ForkError(RumorError):
    """A peer was used in a process forked from the one that created it."""


class PeerClosed(RumorError):
    """The peer was closed (close(), the context manager, or interpreter exit)."""


_open_peers = weakref.WeakSet()
_open_lock = threading.Lock()
# The loop's knobs: the table rumor-peer's flags and rumor-sim's keys come from (core/knobs.hpp).
KNOBS = {k["name"]: k for k in _rumor.knobs()}


def _knob_text(value):
    """A keyword argument's value as the text the C++ table parses (the form a flag takes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return "inf"
    return str(value)


def _check_host_port(s, what, allow_zero):
    """The one HOST:PORT parser (net/address.hpp): IPv4, a name or [IPv6]; ValueError otherwise."""
    if not isinstance(s, str):
        raise ValueError(f"{what} {s!r}: expected a string HOST:PORT, e.g. 127.0.0.1:7000")
    _rumor.parse_host_port(s, what, allow_zero)


class Peer:
    """One member of a Rumor swarm. Cheap to create: it starts listening and joins only when a
    model is bound to it (rumor.torch.GossipOptimizer / ParamAverager, or bind()), because the
    model's fingerprint and size are part of every handshake.

    listen       "HOST:PORT" to accept peers on (IPv4, a name or [IPv6]); port 0 picks a free
                 one (see .address).
    join         members to join through ("HOST:PORT" strings); empty: a new swarm of one.
    swarm_key    path of a swarm key file (docs/security.md); None: an open swarm.
    metrics      a JSON-lines metrics file (docs/metrics.md), or None.
    metrics_listen  "HOST:PORT" to serve HTTP on once a model is bound: /metrics (Prometheus),
                 /status.json and / (the live swarm page), as rumor-peer --metrics-listen; port 0
                 picks a free one (see .metrics_address). None: no endpoint.
    wait_timeout seconds a single staleness wait may block a step before training goes on anyway.
    seed         seeds the protocol's random choices (None: from the address).
    log_level    spdlog level of the peer's stderr log ("warning" by default: quiet).
    name         the peer's name in log lines.
    **knobs      any of the loop's settings, by the names of rumor-peer's flags with '_' for '-'
                 (local_steps=8 is --local-steps 8), with the same defaults and checks: the list
                 below (rumor.KNOBS; docs/flags.md). min_peers: peers starting a swarm together
                 keep their own (shared) initialisation rather than fetching the swarm's model.
    """

    def __init__(self, listen="127.0.0.1:0", join=(), swarm_key=None, metrics=None, wait_timeout=60.0,
                 seed=None, log_level="warning", name=None, metrics_listen=None, **knobs):
        _check_host_port(listen, "listen", True)
        if metrics_listen is not None:
            _check_host_port(metrics_listen, "metrics_listen", True)
        if isinstance(join, str):
            join = [j for j in join.split(",") if j]
        join = list(join)
        for j in join:
            _check_host_port(j, "join", False)
        texts = {}
        for key, value in knobs.items():
            if key not in KNOBS:
                raise TypeError(f"rumor.Peer() got an unexpected keyword argument {key!r} (settings: "
                                f"{', '.join(sorted(KNOBS))})")
            texts[key] = _knob_text(value)
            _rumor.check_knob(key, texts[key])  # ValueError naming the setting and what it accepts
        if not wait_timeout > 0:
            raise ValueError("wait_timeout must be > 0 seconds")
        if swarm_key is not None and not os.path.isfile(swarm_key):
            raise ValueError(f"swarm_key {swarm_key!r}: no such file")
        self._opts = dict(listen=listen, join=join, swarm_key=swarm_key or "", metrics=metrics or "",
                          seed=-1 if seed is None else int(seed), log_level=log_level, name=name or "",
                          knobs=texts, metrics_listen=metrics_listen or "")
        self.settings = dict(knobs)
        self.wait_timeout = float(wait_timeout)
        self._pid = os.getpid()
        self._node = None
        self._closed = False
        self.fingerprint = None

    # -- state -------------------------------------------------------------------------------
    def _check(self):
        if os.getpid() != self._pid:
            raise ForkError("this rumor.Peer was created in process %d and cannot be used in its forked "
                            "child %d: create a new Peer in the child" % (self._pid, os.getpid()))
        if self._closed:
            raise PeerClosed("the peer is closed")

    def _bound(self):
        self._check()
        if self._node is None:
            raise RumorError("no model is bound to this peer yet (use rumor.torch.GossipOptimizer, "
                             "ParamAverager, or Peer.bind(fingerprint, size))")
        return self._node

    @property
    def bound(self):
        return self._node is not None

    @property
    def closed(self):
        return self._closed

    def bind(self, fingerprint, size):
        """Starts the peer for a model of `size` float32 parameters with this fingerprint: listens,
        joins through `join`, and returns the flat parameter buffer (a numpy float32 array that
        shares the peer's memory: the swarm's mixes land in it). Once per peer."""
        self._check()
        if self._node is not None:
            raise RumorError("a model is already bound to this peer (one model per peer)")
        if not isinstance(fingerprint, str) or not fingerprint or len(fingerprint) > 1024:
            raise ValueError("fingerprint must be a non-empty string of at most 1024 characters")
        size = int(size)
        if size < 1:
            raise ValueError(f"size {size}: a model needs at least one parameter")
        node = _rumor.Node(fingerprint, size, **self._opts)
        self._node = node
        self.fingerprint = fingerprint
        with _open_lock:
            _open_peers.add(self)
        return node.buffer()

    @property
    def buffer(self):
        """The flat float32 parameters (numpy, zero-copy)."""
        return self._bound().buffer()

    @property
    def address(self):
        """The "HOST:PORT" this peer listens on: what others pass as join."""
        return self._bound().address()

    @property
    def metrics_address(self):
        """The "HOST:PORT" of the HTTP endpoint (metrics_listen, the real port when 0 was asked
        for): http://HOST:PORT/metrics, /status.json, /. None without metrics_listen."""
        return self._bound().metrics_address() or None

    # -- the protocol --------------------------------------------------------------------------
    def join(self, timeout=60.0):
        """Blocks (GIL released) until this peer is part of the swarm and, as a joiner, holds the
        swarm's model and step (the state transfer), at most `timeout` seconds. Returns the step
        the swarm's model came with (0 for a new swarm or a swarm that has not trained yet).
        Raises FingerprintMismatch when the members train another model, JoinTimeout when none
        answered."""
        node = self._bound()
        r = node.join(float(timeout))
        if r["status"] == "ready":
            return r["step"]
        if r["status"] == "mismatch":
            raise FingerprintMismatch(_explain_mismatch(r["reason"]))
        raise JoinTimeout(f"could not join through {', '.join(self._opts['join']) or '(nobody)'} within "
                          f"{timeout:.3g} s: {r['reason'] or 'no member answered'}")

    def begin_step(self):
        """Hands what arrived to the protocol (mixes land in the buffer). Returns the change the
        swarm made to the buffer since the last end_step() (a numpy float32 array to add to the
        live parameters), or None when nothing was mixed in."""
        return self._bound().begin_step(self.wait_timeout)

    def end_step(self, loss=0.0, seconds=0.0, samples=1):
        """The live parameters were just copied into the buffer: one local step is done. Starts an
        exchange when one is due (every local_steps steps); when the staleness bound holds this
        peer back, blocks (GIL released, at most wait_timeout s) until the slowest peer catches up
        or leaves. Returns the change mixed in during that wait (as begin_step()), or None."""
        return self._bound().end_step(float(loss), float(seconds), int(samples), self.wait_timeout)

    def serve(self, seconds=None, max_seconds=None):
        """Pauses training to average with the swarm (GIL released), as a settling rumor-peer does:
        starts exchanges (every 10 ms while the models differ; once an exchange found them equal,
        no faster than training did; none once they agree) and answers exchanges, state transfers
        to joiners and probes, for `seconds` (default: the settle setting, 3 s), or up to
        `max_seconds` (default: settle_max, 60 s) while a live peer is still behind this one's
        clock (still training; given `seconds` alone: no longer than that), then `seconds` more
        from the moment the last one caught up, so
        that the first to finish still averages in the others' last steps. Before training
        begins (joining) it only answers, for `seconds`. Between steps a peer answers the swarm in
        the background anyway (docs/python.md). Returns the change mixed into the buffer
        meanwhile (as begin_step()), or None."""
        if seconds is None:  # the settle settings, both
            return self._bound().serve(-1.0, -1.0 if max_seconds is None else float(max_seconds))
        return self._bound().serve(float(seconds), 0.0 if max_seconds is None else float(max_seconds))

    def report(self, test_acc, loss=float("nan"), epoch=0.0):
        """Writes an "eval" metrics line with what your loop measured (test accuracy, loss, epoch)
        and the peer's counters, so examples/report.py shows Python peers like C++ ones."""
        self._bound().report(float(test_acc), float(loss), float(epoch))

    def set_extra_state(self, blob):
        """Publishes `blob` (bytes-like, copied) as this peer's extra state: what a joiner that takes
        its model from us receives with it, from the same moment, and never averaged
        (rumor.torch.GossipOptimizer publishes its optimizer state here). Empty: none."""
        self._bound().set_extra_state(blob)

    def received_extra_state(self):
        """The extra state that our join brought with the swarm's model (bytes; empty if the member
        we took the model from had none, or we took none)."""
        return self._bound().received_extra_state()

    def stats(self):
        """Counters: steps, samples, exchanges (initiated + answered), failed, rejected, stale,
        peers (alive or suspect, ourselves included), alive, waits, wait_s, bytes_sent, bytes_recv."""
        return self._bound().stats()

    def close(self, timeout=5.0):
        """Graceful leave: announce, hand the model over to a neighbour, stop the network.
        Returns within about `timeout` seconds whatever the others do. Idempotent."""
        if os.getpid() != self._pid:
            raise ForkError("this rumor.Peer belongs to process %d (the parent of this fork): close it "
                            "there" % self._pid)
        if self._closed:
            return
        self._closed = True
        node, self._node = self._node, None
        if node is not None:
            node.close(float(timeout))
            self._node_closed = node  # keeps the buffer's memory valid for arrays still in use
        with _open_lock:
            _open_peers.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if os.getpid() == self._pid:
            self.close()
        return False

    def __repr__(self):
        state = "closed" if self._closed else (self._node.address() if self._node else "unbound")
        return f"<rumor.Peer {state}>"


Peer.__doc__ += "\n    Settings (**knobs):\n" + "".join(
    f"    {k['name']:<18} {k['help']} (default {k['default']}; {k['accepted']})\n" for k in KNOBS.values())


def _explain_mismatch(reason):
    """The transport's "model fingerprint mismatch: ours 'A', theirs 'B'" with the first
    difference named (rumor.torch fingerprints list every parameter)."""
    import re
    m = re.search(r"ours '([^']*)', theirs '([^']*)'", reason or "")
    if not m:
        return reason or "model fingerprint mismatch"
    ours, theirs = m.group(1), m.group(2)
    try:
        from .fingerprint import first_difference
        diff = first_difference(ours, theirs)
    except Exception:  # a fingerprint we cannot parse: show both
        diff = None
    msg = "the swarm trains a different model"
    if diff:
        msg += ": " + diff
    return msg + f" (ours '{ours}', theirs '{theirs}')"


def _close_all_at_exit():
    with _open_lock:
        peers = list(_open_peers)
    for p in peers:
        if os.getpid() == p._pid:
            try:
                p.close(timeout=2.0)
            except Exception:
                pass


# A forked child inherits these objects but not the parent's threads or sockets: its copies
# must never be closed or destroyed there. Every call checks the pid (ForkError), close() at exit
# skips them, and the C++ destructor of a node made by another process leaves it alone.
atexit.register(_close_all_at_exit)
