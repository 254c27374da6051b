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

__all__ = ["Peer", "KNOBS", "shard_from_env", "RumorError", "FingerprintMismatch", "JoinTimeout", "ForkError", "PeerClosed", "WaitTimeout",
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
    swarm_epochs a swarm-wide budget (as rumor-peer --swarm-epochs): your loop stops when the
                 swarm as a whole has processed this many passes over the whole training set of
                 `train_set_size` rows (all shards together); `peer.done` says when, and
                 `peer.swarm_progress` how far it is (for a schedule that anneals with the swarm).
    swarm_samples the same budget in samples (replaces swarm_epochs).
    train_set_size rows of the whole training set (needed by swarm_epochs).
    **knobs      any of the loop's settings, by the names of rumor-peer's flags with '_' for '-'
                 (local_steps=8 is --local-steps 8), with the same defaults and checks: the list
                 below (rumor.KNOBS; docs/flags.md). min_peers: peers starting a swarm together
                 keep their own (shared) initialisation rather than fetching the swarm's model.
    """

    def __init__(self, listen=None, join=None, swarm_key=None, metrics=None, wait_timeout=60.0,
                 seed=None, log_level="warning", name=None, metrics_listen=None, swarm_epochs=None,
                 swarm_samples=None, train_set_size=None, **knobs):
        # rumor-run's environment gives what the arguments leave out (docs/python.md "rumor-run").
        listen, join, name, metrics, knobs, self.shard = _from_launcher(listen, join, name, metrics, knobs)
        if metrics_listen is None:
            metrics_listen = os.environ.get("RUMOR_METRICS_LISTEN") or None  # rumor-run --metrics-port
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
        _rumor.check_knobs(texts)  # ValueError: settings that do not combine (codec topk with fragments > 1)
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
        self._trained = False  # steps since the last serve(): close() settles first
        self._settle_hook = None  # rumor.torch: serve() and apply the mix to the live parameters
        self.fingerprint = None
        self._swarm_target = None  # samples (set_swarm_budget)
        self._budget_done = False  # done: the budget was reached (the peer said so in its digests)
        self._lr_scale = 1.0
        if swarm_epochs is not None or swarm_samples is not None:
            self.set_swarm_budget(swarm_epochs, swarm_samples, train_set_size)
        _leave_on_sigterm()

    # -- the swarm-wide budget -----------------------------------------------------------------
    def set_swarm_budget(self, swarm_epochs=None, swarm_samples=None, train_set_size=None):
        """Sets the swarm-wide budget (Peer(swarm_epochs=...) does it; GossipOptimizer(swarm_epochs=
        ...) too): swarm_samples, or swarm_epochs passes over a training set of train_set_size
        rows. Returns the budget in samples."""
        if swarm_samples is not None:
            if isinstance(swarm_samples, bool) or not int(swarm_samples) >= 1:
                raise ValueError(f"swarm_samples {swarm_samples!r}: expected a number of samples >= 1")
            target = int(swarm_samples)
        elif swarm_epochs is not None:
            if not float(swarm_epochs) > 0:
                raise ValueError(f"swarm_epochs {swarm_epochs!r}: expected passes > 0")
            if train_set_size is None or isinstance(train_set_size, bool) or not int(train_set_size) >= 1:
                raise ValueError("swarm_epochs needs train_set_size: the rows of the whole training set (all "
                                 "shards together), e.g. train_set_size=len(train_dataset)")
            target = math.ceil(float(swarm_epochs) * int(train_set_size))
        else:
            raise ValueError("set_swarm_budget: give swarm_epochs (with train_set_size) or swarm_samples")
        if self._swarm_target is not None and self._swarm_target != target:
            raise ValueError(f"this peer already has a swarm-wide budget of {self._swarm_target} samples, "
                             f"not {target}")
        self._swarm_target = target
        return target

    @property
    def swarm_target(self):
        """The swarm-wide budget in samples, or None without one."""
        return self._swarm_target

    @property
    def swarm_progress(self):
        """The swarm's progress towards its budget in [0, 1] (the samples every member has
        processed, as this peer knows them, leavers included, over the budget), or None without a
        budget. A learning-rate schedule can follow it instead of local steps, so that a slow peer
        anneals with the swarm (docs/python.md)."""
        if self._swarm_target is None:
            return None
        return min(1.0, self._bound().stats()["swarm_samples"] / self._swarm_target)

    @property
    def done(self):
        """True once the swarm as a whole has processed the budget (False without one): stop
        training, as every rumor-peer with --swarm-samples does at the same point. From then on
        the peer's digests say it has finished training, as after close(): serve() then waits only
        for members still training, and they pick partners still training first."""
        if self._swarm_target is None:
            return False
        if self._budget_done:
            return True
        node = self._bound()
        if node.stats()["swarm_samples"] >= self._swarm_target:
            node.training_done()
            self._budget_done = True
        return self._budget_done

    def lr_scale(self):
        """The factor for the learning rate of the step about to be taken: the peers training now
        (ourselves included) over the most this peer has seen while training (1 with
        lr_follows_peers=False). A peer whose neighbours finished or died trains on at a
        proportionally smaller rate instead of losing the averaging's noise reduction
        (docs/python.md, "A peer left alone"). Call it once per step; GossipOptimizer does."""
        f = self._bound().lr_scale()
        if f != self._lr_scale:
            n = self._bound().stats()["trainers"]
            self._say(f"learning rate x{f:.3g}: {int(n)} peer(s) training now, of the {round(n / f)} seen "
                      "(lr_follows_peers)")
            self._lr_scale = f
        return f

    @classmethod
    def from_env(cls, **kwargs):
        """A peer as rumor-run describes it: listen, join, name, shard (`peer.shard`, (K, N)),
        min_peers and metrics from RUMOR_LISTEN, RUMOR_JOIN, RUMOR_NAME, RUMOR_SHARD,
        RUMOR_MIN_PEERS and RUMOR_METRICS; keyword arguments win. Outside rumor-run: a swarm of
        one (shard 1/1). Peer() reads the same variables for the arguments it is not given."""
        return cls(**kwargs)

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

    def model_copied(self):
        """Says that the model join() brought has been copied out of the buffer (into the live
        parameters). From then until the first begin_step() the peer answers the swarm in the
        background, as it does between steps: a joiner gets its model from us, and exchanges mix
        into the buffer, their change returned by begin_step(). Without it the buffer stays
        the caller's and the peer answers nobody until it steps (a member that joined and
        then loads its data for a minute would make every joiner through it time out).
        rumor.torch calls it itself. RuntimeError unless right after a successful join()."""
        self._bound().model_copied()

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
        node = self._bound()
        self._trained = True
        return node.end_step(float(loss), float(seconds), int(samples), self.wait_timeout)

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
        node = self._bound()
        self._trained = False
        if seconds is None:  # the settle settings, both
            return node.serve(-1.0, -1.0 if max_seconds is None else float(max_seconds))
        return node.serve(float(seconds), 0.0 if max_seconds is None else float(max_seconds))

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
        peers (alive or suspect, ourselves included), alive, waits, wait_s, bytes_sent, bytes_recv,
        swarm_samples (the samples the whole swarm has processed as this peer knows them: every
        member's count from the digests, those that left included; a loop with a swarm-wide budget
        stops when it reaches its target, as rumor-peer --swarm-samples does): ints, but wait_s
        (seconds, a float)."""
        return {k: (v if k == "wait_s" else int(v)) for k, v in self._bound().stats().items()}

    def close(self, timeout=5.0, settle=True):
        """Ends this peer's part in the swarm. With `settle` (the default) and steps taken since
        the last serve(), it first settles as rumor-peer does at the end of training (serve()
        with the settle settings: 3 s, up to settle_max while a live peer is still training),
        and says so on stderr, so that every peer ends on the swarm's model. Then the graceful
        leave: announce, hand the model over to a neighbour, stop the network, within about
        `timeout` seconds whatever the others do. Idempotent."""
        if os.getpid() != self._pid:
            raise ForkError("this rumor.Peer belongs to process %d (the parent of this fork): close it "
                            "there" % self._pid)
        if self._closed:
            return
        if settle and self._trained and self._node is not None:
            self._say("training ended: settling with the swarm before leaving (serve(): settle "
                      f"{self.settings.get('settle', KNOBS['settle']['default'])} s, up to settle_max while a "
                      "peer is still training; close(settle=False) skips it)")
            try:
                # It will not train again: trainers pick others first while it settles (docs/python.md).
                self._node.training_done()
                (self._settle_hook or self.serve)()
            except Exception as e:  # noqa: BLE001 - a peer that cannot settle (diverged) still leaves
                self._say(f"could not settle ({type(e).__name__}: {e}); leaving")
        self._closed = True
        node, self._node = self._node, None
        if node is not None:
            node.close(float(timeout))
            self._node_closed = node  # keeps the buffer's memory valid for arrays still in use
        with _open_lock:
            _open_peers.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if os.getpid() == self._pid:
            self.close(settle=exc_type is None)  # an exception: leave at once
        return False

    def _say(self, msg):
        import sys
        print(f"rumor: {self._opts['name'] or 'peer'}: {msg}", file=sys.stderr, flush=True)

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


def _from_launcher(listen, join, name, metrics, knobs):
    """Fills what the caller left out from rumor-run's variables (python/rumor/run.py)."""
    env = os.environ
    if listen is None:
        listen = env.get("RUMOR_LISTEN") or "127.0.0.1:0"
    if join is None:
        join = env.get("RUMOR_JOIN", "")
    if name is None:
        name = env.get("RUMOR_NAME") or None
    if metrics is None:
        metrics = env.get("RUMOR_METRICS") or None
    if "min_peers" not in knobs and env.get("RUMOR_MIN_PEERS"):
        knobs = dict(knobs, min_peers=env["RUMOR_MIN_PEERS"])
    return listen, join, name, metrics, knobs, shard_from_env()


def shard_from_env():
    """(K, N) from RUMOR_SHARD=K/N (rumor-run), or (1, 1) when it is not set."""
    text = os.environ.get("RUMOR_SHARD")
    if not text:
        return (1, 1)
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"RUMOR_SHARD={text!r}: expected K/N with 1 <= K <= N")
    return (int(k), int(n))


def _leave_on_sigterm():
    """Under rumor-run (RUMOR_RUN=1), SIGTERM raises SystemExit(0) in the main thread: the loop
    unwinds, a `with` block or the exit hook closes the peer (a graceful leave), exit code 0, as
    rumor-peer does. Only where SIGTERM still has its default action."""
    import signal
    if os.environ.get("RUMOR_RUN") != "1" or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def leave(signum, frame):
        import sys
        print(f"rumor: {os.environ.get('RUMOR_NAME', 'peer')}: SIGTERM: leaving the swarm", file=sys.stderr,
              flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)


def _close_all_at_exit():
    with _open_lock:
        peers = list(_open_peers)
    for p in peers:
        if os.getpid() == p._pid:
            try:
                p.close(timeout=2.0, settle=False)
            except Exception:
                pass


# A forked child inherits these objects but not the parent's threads or sockets: its copies
# must never be closed or destroyed there. Every call checks the pid (ForkError), close() at exit
# skips them, and the C++ destructor of a node made by another process leaves it alone.
atexit.register(_close_all_at_exit)
