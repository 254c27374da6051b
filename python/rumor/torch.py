"""PyTorch on a Rumor peer: GossipOptimizer wraps any torch.optim optimizer, ParamAverager
serves loops that update parameters themselves. Both copy the model's parameters into the
peer's flat float32 buffer after each local step and add what the swarm mixed into that buffer
to the live parameters at the next one (the overlap, or delta, rule: params += flat_after_mix -
flat_as_last_copied, so local progress made meanwhile is kept). docs/python.md.

The flat layout and the fingerprint (rumor/fingerprint.py):
  - a model that is exactly one of Rumor's C++ dense models (nn.Sequential of Linear layers with
    biases, ReLU between them, optionally a leading nn.Flatten) gets that model's fingerprint
    and layout: per layer W as (in x out) row-major, i.e. weight transposed, then the bias. So a
    Python peer and `rumor-peer --model mlp:256,128` average the same numbers;
  - any other model: its parameters, then its floating-point buffers (BatchNorm statistics),
    in named_parameters()/named_buffers() order, each flattened as it is in memory; the
    fingerprint lists every name and shape.
CPU tensors go through numpy views of the buffer (no copy but the one into place); CUDA tensors
through a pinned host buffer, with an explicit synchronize before the C++ side reads it.
"""
import math
import time

import numpy as np
import torch
from torch import nn

from . import Peer, RumorError
from .fingerprint import dense_fingerprint, torch_fingerprint

__all__ = ["GossipOptimizer", "ParamAverager", "ModelLayout", "ModelChanged"]


class ModelChanged(RumorError, ValueError):
    """A parameter was replaced, reshaped, converted or made non-contiguous after the model was
    bound to its peer: the flat layout no longer describes it."""


def _dense_widths(model):
    """Input/output widths of the Linear layers if `model` is one of the C++ dense models, else None."""
    if not isinstance(model, nn.Sequential):
        return None
    mods = list(model.children())
    if mods and isinstance(mods[0], nn.Flatten):
        mods = mods[1:]
    if not mods or len(mods) % 2 == 0:
        return None
    for i, m in enumerate(mods):
        if i % 2 == 0 and not (type(m) is nn.Linear and m.bias is not None):
            return None
        if i % 2 == 1 and type(m) is not nn.ReLU:
            return None
    if any(True for _ in model.buffers()):
        return None
    linears = mods[0::2]
    widths = [linears[0].in_features] + [m.out_features for m in linears]
    if any(a.out_features != b.in_features for a, b in zip(linears, linears[1:])):
        return None
    return widths, linears


class ModelLayout:
    """Where each tensor of a model lives in the flat buffer, and the copies in and out.

    model        an nn.Module (or None with `params`: a list of tensors, named p0, p1, ...).
    loss         "ce" or "mse": part of the C++ dense models' fingerprint (ignored otherwise).
    fingerprint  "auto" (the C++ dense form where the model is one), "torch" (always the
                 generic form), or an explicit string (the generic layout under that name).
    """

    def __init__(self, model=None, params=None, loss="ce", fingerprint="auto"):
        if loss not in ("ce", "mse"):
            raise ValueError(f"loss {loss!r}: expected 'ce' (cross-entropy) or 'mse'")
        if fingerprint not in ("auto", "torch") and not isinstance(fingerprint, str):
            raise ValueError("fingerprint must be 'auto', 'torch' or a string")
        self.entries = []  # (name, tensor, offset, numel, transposed)
        dense = _dense_widths(model) if (model is not None and fingerprint == "auto") else None
        off = 0
        if dense is not None:
            widths, linears = dense
            names = {id(p): n for n, p in model.named_parameters()}  # torch's names, for messages
            for lin in linears:
                for t, tr in ((lin.weight, True), (lin.bias, False)):
                    self.entries.append((names[id(t)], t, off, t.numel(), tr))
                    off += t.numel()
            kind = "mlp" if len(linears) > 1 else ("logreg" if loss == "ce" else "linreg")
            self.fingerprint = dense_fingerprint(kind, widths, "ce" if kind != "linreg" else "mse")
            if kind == "mlp" and loss != "ce":
                raise ValueError("Rumor's C++ MLP is trained with cross-entropy (loss='ce'); "
                                 "pass fingerprint='torch' for another loss")
        else:
            if model is not None:
                named = [(n, p) for n, p in model.named_parameters()]
                named += [("buffer:" + n, b) for n, b in model.named_buffers() if b.is_floating_point()]
                non_float = [n for n, b in model.named_buffers() if not b.is_floating_point()]
                self.skipped_buffers = non_float  # e.g. BatchNorm's num_batches_tracked: local
            elif params is not None:
                named = [(f"p{i}", p) for i, p in enumerate(params)]
            else:
                raise ValueError("give a model (or a list of parameters)")
            if not named:
                raise ValueError("the model has no parameters to average")
            seen = set()
            for name, t in named:
                if id(t) in seen:  # tied weights: one copy
                    continue
                seen.add(id(t))
                self.entries.append((name, t, off, t.numel(), False))
                off += t.numel()
            self.fingerprint = (torch_fingerprint([(n, tuple(t.shape)) for n, t, *_ in self.entries])
                                if fingerprint in ("auto", "torch") else fingerprint)
        self.size = off
        self._signature = self._sign()
        self.check()
        self._cuda = any(t.is_cuda for _, t, *_ in self.entries)
        self._host = None  # pinned staging for CUDA tensors (made on first use)
        self._flat = None

    def _sign(self):
        return [(id(t), tuple(t.shape), t.dtype, t.device) for _, t, *_ in self.entries]

    def check(self, model=None):
        """Raises a clear exception when a tensor cannot go through the flat buffer as it is."""
        for name, t, off, n, tr in self.entries:
            if t.dtype != torch.float32:
                raise TypeError(f"parameter '{name}' is {str(t.dtype).replace('torch.', '')}: Rumor exchanges "
                                "float32 parameters (call model.float() before binding it)")
            if not t.is_contiguous():
                raise ValueError(f"parameter '{name}' is not contiguous (strides {tuple(t.stride())}): "
                                 "make it contiguous before binding (p.data = p.data.contiguous())")
            if t.is_sparse:
                raise ValueError(f"parameter '{name}' is sparse: only dense float32 tensors can be averaged")
        if self._sign() != self._signature:
            now = self._sign()
            for (name, *_), a, b in zip(self.entries, self._signature, now):
                if a != b:
                    raise ModelChanged(f"parameter '{name}' changed after the model was bound to its peer "
                                       f"(shape {list(a[1])} -> {list(b[1])}, {a[2]} -> {b[2]}, {a[3]} -> {b[3]}"
                                       f"{', or it was replaced by another tensor' if a[1:] == b[1:] else ''}); "
                                       "a peer's model cannot change shape: bind a new peer for the new model")
        if model is not None:
            ids = {id(t) for _, t, *_ in self.entries}
            for n, p in model.named_parameters():
                if id(p) not in ids:
                    raise ModelChanged(f"parameter '{n}' was added to the model after it was bound to its "
                                       "peer; a peer's model cannot change: bind a new peer for the new model")

    def bind(self, flat):
        """Uses `flat` (the peer's numpy float32 buffer, self.size long) from now on."""
        if flat.dtype != np.float32 or flat.size != self.size:
            raise ValueError(f"flat buffer of {flat.size} {flat.dtype} values, expected {self.size} float32")
        self._flat = torch.from_numpy(flat)  # shares the memory: writes land in the peer's buffer
        if self._cuda and self._host is None:
            self._host = torch.empty(self.size, dtype=torch.float32, pin_memory=torch.cuda.is_available())

    def _views(self, buf):
        for name, t, off, n, tr in self.entries:
            v = buf[off:off + n]
            v = v.view(t.shape[1], t.shape[0]).t() if tr else v.view(t.shape)
            yield t, v

    @torch.no_grad()
    def copy_in(self):
        """Live parameters -> flat buffer."""
        if not self._cuda:
            for t, v in self._views(self._flat):
                v.copy_(t)
            return
        for t, v in self._views(self._host):
            v.copy_(t, non_blocking=True)
        torch.cuda.synchronize()  # every device-to-host copy has landed before C++ reads the buffer
        self._flat.copy_(self._host)

    @torch.no_grad()
    def copy_out(self):
        """Flat buffer -> live parameters (a state transfer: replace, not add)."""
        src = self._flat
        if self._cuda:
            self._host.copy_(self._flat)
            src = self._host
        for t, v in self._views(src):
            t.copy_(v, non_blocking=True)
        if self._cuda:
            torch.cuda.synchronize()  # the staging buffer is free again

    @torch.no_grad()
    def add(self, delta):
        """Live parameters += delta (a numpy float32 array in the flat layout)."""
        d = torch.from_numpy(delta)
        if self._cuda:
            self._host.copy_(d)
            d = self._host
        for t, v in self._views(d):
            t.add_(v.to(t.device, non_blocking=True) if t.is_cuda else v)
        if self._cuda:
            torch.cuda.synchronize()


class _Sync:
    """The step protocol shared by GossipOptimizer and ParamAverager."""

    def __init__(self, peer, layout, model, samples_per_step):
        if not isinstance(peer, Peer):
            raise TypeError("peer must be a rumor.Peer")
        if peer.bound:
            raise RumorError("this peer already has a model: one model per peer")
        self.peer, self.layout, self.model = peer, layout, model
        self.samples_per_step = int(samples_per_step)
        flat = peer.bind(layout.fingerprint, layout.size)
        layout.bind(flat)
        layout.copy_in()  # our initialisation, until (and unless) the swarm's model replaces it
        self._last = None
        self.joined = False
        self.rumor_seconds = 0.0  # time spent in Rumor's part of step() (samples/s overhead)

    def join(self, timeout):
        step = self.peer.join(timeout)
        self.layout.copy_out()  # the swarm's model (or our own, if we are the first)
        self.joined = True
        return step

    def before_update(self):
        self._t0 = time.perf_counter()
        self.layout.check(self.model)
        delta = self.peer.begin_step()
        if delta is not None:
            self.layout.add(delta)
        self.rumor_seconds += time.perf_counter() - self._t0

    def serve(self, seconds, max_seconds=0.0):
        self.layout.check(self.model)
        delta = self.peer.serve(seconds, max_seconds)
        if delta is not None:
            self.layout.add(delta)
        self._last = None  # not training time

    def report(self, test_acc, loss, epoch):
        self.peer.report(test_acc, loss, epoch)
        self._last = None  # the evaluation before it was not training time

    def after_update(self, loss, samples):
        t0 = time.perf_counter()
        self.layout.copy_in()
        now = time.perf_counter()
        seconds = now - self._last if self._last is not None else 0.0
        if loss is not None and torch.is_tensor(loss):
            loss = float(loss.detach())
        delta = self.peer.end_step(0.0 if loss is None else float(loss), seconds,
                                   self.samples_per_step if samples is None else int(samples))
        if delta is not None:
            self.layout.add(delta)
        self._last = time.perf_counter()
        self.rumor_seconds += self._last - t0


class GossipOptimizer:
    """Wraps a torch.optim optimizer: step() is a local step and, every local_steps steps, an
    exchange with a random neighbour; what neighbours mixed in since the last step is added to
    the parameters first (the overlap rule). Everything else (zero_grad, param_groups,
    state_dict, ...) is the wrapped optimizer's.

    optimizer  any torch.optim optimizer over the model's parameters.
    peer       a rumor.Peer (not yet bound to a model).
    model      the nn.Module (names its parameters for the fingerprint, finds the C++-compatible
               layout); None: the optimizer's parameters, in order.
    samples_per_step  samples in a batch (the "samples" mix weight and samples/s use it).
    """

    def __init__(self, optimizer, peer, model=None, loss="ce", fingerprint="auto", samples_per_step=1):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        layout = ModelLayout(model, params if model is None else None, loss, fingerprint)
        if model is not None:
            mine = {id(t) for _, t, *_ in layout.entries}
            missing = [i for i, p in enumerate(params) if id(p) not in mine]
            if missing:
                raise ValueError(f"the optimizer updates {len(missing)} tensor(s) that are not parameters of "
                                 "`model`: their values would never be averaged")
        self.optimizer = optimizer
        self._sync = _Sync(peer, layout, model, samples_per_step)
        self.peer = peer
        self.layout = layout

    def join(self, timeout=60.0):
        """Joins the swarm (bounded: at most `timeout` s) and takes its model and step before the
        first local step. Returns the swarm's step (0: a new swarm, or one that has not trained)."""
        return self._sync.join(timeout)

    def step(self, closure=None, loss=None, samples=None):
        """The overlap rule, then the wrapped optimizer's step, then the peer's: copy the
        parameters in, start an exchange when due, wait if the staleness bound says so."""
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._sync.before_update()
        out = self.optimizer.step()
        self._sync.after_update(loss, samples)
        return loss if closure is not None else out

    def serve(self, seconds, max_seconds=0.0):
        """Answers the swarm for `seconds` (up to max_seconds while a peer is still training)
        without training (see rumor.Peer.serve); what was mixed in meanwhile is applied to the
        parameters."""
        self._sync.serve(seconds, max_seconds)

    def report(self, test_acc, loss=float("nan"), epoch=0.0):
        """An "eval" metrics line (rumor.Peer.report); the time since the last step is not
        counted as training time (samples/s)."""
        self._sync.report(test_acc, loss, epoch)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, sd):
        self.optimizer.load_state_dict(sd)

    @property
    def rumor_seconds(self):
        """Seconds spent in Rumor's part of step() (the protocol, the copies, staleness waits)."""
        return self._sync.rumor_seconds

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def __getattr__(self, name):
        if name in ("optimizer", "_sync", "peer", "layout"):
            raise AttributeError(name)
        return getattr(self.optimizer, name)


class ParamAverager:
    """For loops that update parameters themselves: call step() after each local update."""

    def __init__(self, model, peer, loss="ce", fingerprint="auto", samples_per_step=1):
        if isinstance(model, nn.Module):
            layout = ModelLayout(model, None, loss, fingerprint)
        else:
            model = list(model)
            layout = ModelLayout(None, model, loss, fingerprint)
            model = None
        self._sync = _Sync(peer, layout, model, samples_per_step)
        self.peer = peer
        self.layout = layout

    def join(self, timeout=60.0):
        return self._sync.join(timeout)

    def step(self, loss=None, samples=None):
        """One local update was made: apply the swarm's mixes (overlap rule), copy the parameters
        in, start an exchange when due, wait if the staleness bound says so."""
        self._sync.before_update()
        self._sync.after_update(loss, samples)

    def serve(self, seconds, max_seconds=0.0):
        """Answers the swarm for `seconds` without training (see rumor.Peer.serve)."""
        self._sync.serve(seconds, max_seconds)

    def report(self, test_acc, loss=float("nan"), epoch=0.0):
        """An "eval" metrics line (rumor.Peer.report), as GossipOptimizer.report."""
        self._sync.report(test_acc, loss, epoch)
