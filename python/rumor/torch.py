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
    fingerprint lists every name and shape. Normalisation layers' running statistics travel
    (state transfer, hand-over) but a mix does not land in them: each peer keeps its own.
CPU tensors go through numpy views of the buffer (no copy but the one into place); CUDA tensors
through a pinned host buffer, with an explicit synchronize before the C++ side reads it.
"""
import collections
import json
import math
import os
import struct
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

from . import Peer, RumorError, shard_from_env
from .fingerprint import dense_fingerprint, torch_fingerprint

__all__ = ["GossipOptimizer", "ParamAverager", "ModelLayout", "ModelChanged", "encode_optimizer_state",
           "decode_optimizer_state", "decode_scheduler_states", "OptimizerStateWarning", "swarm", "ShardSampler"]


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
        # Normalisation layers' running statistics (BatchNorm, InstanceNorm with running stats)
        # travel in the flat buffer (a joiner's state transfer and a leaver's hand-over carry
        # them) but a mix does not land in them: each peer keeps the running mean and variance
        # of its own batches under its own, mixed, weights, as its BatchNorm computes them. Mixed
        # through a lossy codec they took the block's quantisation error (int8's and int4's
        # blocks share one scale with the weights and means beside them), and nothing refreshed
        # them after training: a 4-peer torch CNN at int8 ended one peer at test accuracy 0.10
        # (loss NaN: a variance below zero), and at int4 two peers at 0.63-0.64 (loss 22) after
        # settling (docs/python.md). A state transfer's variances are clamped at 0.
        stats, variances = set(), set()
        if model is not None:
            for mod in model.modules():
                if isinstance(mod, torch.nn.modules.batchnorm._NormBase):
                    stats |= {id(b) for b in (mod.running_mean, mod.running_var) if b is not None}
                    if mod.running_var is not None:
                        variances.add(id(mod.running_var))
        self.statistics = [name for name, t, *_ in self.entries if id(t) in stats]
        self._stat_ids = stats
        self.variances = [t for _, t, *_ in self.entries if id(t) in variances]
        self._signature = self._sign()
        self.check()
        # Tensors off the CPU go through a host staging buffer (pinned where CUDA is): the C++
        # side never touches device memory. Every device the model uses is synchronized before
        # the C++ side reads the buffer (torch.cuda.synchronize() alone waits for the current
        # device only, and a model may live on cuda:1 while cuda:0 is current).
        self._devices = sorted({t.device for _, t, *_ in self.entries if t.device.type != "cpu"}, key=str)
        self._staged = bool(self._devices)
        self._host = None  # the staging buffer (made at bind)
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
        if self._staged and self._host is None:
            pin = any(d.type == "cuda" for d in self._devices) and torch.cuda.is_available()
            self._host = torch.empty(self.size, dtype=torch.float32, pin_memory=pin)

    def _synchronize(self):
        """Waits until every queued copy to or from the model's devices has landed."""
        for d in self._devices:
            if d.type == "cuda":
                torch.cuda.synchronize(d)

    def _views(self, buf):
        for name, t, off, n, tr in self.entries:
            v = buf[off:off + n]
            v = v.view(t.shape[1], t.shape[0]).t() if tr else v.view(t.shape)
            yield t, v

    @torch.no_grad()
    def copy_in(self):
        """Live parameters -> flat buffer."""
        if not self._staged:
            for t, v in self._views(self._flat):
                v.copy_(t)
            return
        for t, v in self._views(self._host):
            v.copy_(t, non_blocking=t.is_cuda)  # device-to-host copies queued into pinned memory
        self._synchronize()  # every one has landed before the C++ side reads the buffer
        self._flat.copy_(self._host)

    @torch.no_grad()
    def copy_out(self):
        """Flat buffer -> live parameters (a state transfer: replace, not add)."""
        src = self._flat
        if self._staged:
            self._host.copy_(self._flat)
            src = self._host
        for t, v in self._views(src):
            t.copy_(v, non_blocking=t.is_cuda)
        self._synchronize()  # the staging buffer is free again
        for t in self.variances:
            t.clamp_(min=0)

    @torch.no_grad()
    def add(self, delta):
        """Live parameters += delta (a numpy float32 array in the flat layout); normalisation
        layers' running statistics stay the peer's own (self.statistics)."""
        d = torch.from_numpy(delta)
        if self._staged:
            self._host.copy_(d)
            d = self._host
        for t, v in self._views(d):
            if id(t) not in self._stat_ids:
                t.add_(v.to(t.device, non_blocking=t.is_cuda) if t.device != v.device else v)
        self._synchronize()  # the uploads have landed: the staging buffer is free again


class OptimizerStateWarning(UserWarning):
    """The optimizer state that came with the swarm's model could not be used (another optimizer,
    another model, or bad values): the optimizer starts from a fresh state, training goes on."""


# The optimizer state as it travels to a joiner (Peer.set_extra_state): never pickle, since a
# joiner must be able to read what any member sends without running its code. The layout:
#   _OPT_MAGIC, u32 LE header length, a JSON header, then the raw tensor bytes it describes.
# Header: {"optimizer": class name, "params": how many parameters the optimizer updates,
#          "tensors": [[param index, key, dtype, shape, byte offset, byte length], ...],
#          "numbers": [[param index, key, value], ...]}
# Parameters are numbered in the optimizer's param_groups order. Only tensors and plain numbers
# travel (None and anything else, e.g. L-BFGS's lists, stay out).
_OPT_MAGIC = b"RUMOR-OPTIM-1\n"
_OPT_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
               "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}


def _opt_params(optimizer):
    return [p for g in optimizer.param_groups for p in g["params"]]


def _plain(v):
    """v when it is JSON made of numbers, strings, booleans, None and lists of them, else None."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float)):
        return v if math.isfinite(v) else None
    if isinstance(v, (list, tuple)):
        items = [_plain(x) for x in v]
        return items if all(x is not None or y is None for x, y in zip(items, v)) else None
    return None


def _scheduler_state(sched):
    """An LR scheduler's state_dict(), its plain values only (LambdaLR's functions stay out)."""
    return [type(sched).__name__, {k: _plain(v) for k, v in sched.state_dict().items()
                                   if _plain(v) is not None or v is None}]


def encode_optimizer_state(optimizer, schedulers=()):
    """The optimizer's per-parameter state as bytes (see decode_optimizer_state), with the state
    of the LR schedulers given (plain numbers: decode_scheduler_states), or b"" when it has none
    yet (before its first step)."""
    params = _opt_params(optimizer)
    tensors, numbers, arrays, off = [], [], [], 0
    for i, p in enumerate(params):
        st = optimizer.state.get(p)
        if not st:
            continue
        for key in sorted(k for k in st if isinstance(k, str)):
            v = st[key]
            if torch.is_tensor(v):
                name = str(v.dtype).replace("torch.", "")
                if name not in _OPT_DTYPES or v.is_sparse:
                    continue
                t = v.detach()
                if t.dtype == torch.bfloat16:
                    t = t.view(torch.int16)  # numpy has no bfloat16: the bits travel
                a = t.to("cpu").contiguous().numpy()
                tensors.append([i, key, name, list(v.shape), off, a.nbytes])
                arrays.append(a)
                off += a.nbytes
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                numbers.append([i, key, v])
    if not tensors and not numbers:
        return b""
    header = json.dumps({"optimizer": type(optimizer).__name__, "params": len(params), "tensors": tensors,
                         "numbers": numbers, "schedulers": [_scheduler_state(x) for x in schedulers]},
                        separators=(",", ":")).encode()
    head = len(_OPT_MAGIC) + 4 + len(header)
    out = bytearray(head + off)
    out[:head] = _OPT_MAGIC + struct.pack("<I", len(header)) + header
    dst = np.frombuffer(out, dtype=np.uint8)
    for (_, _, _, _, o, n), a in zip(tensors, arrays):
        dst[head + o:head + o + n] = a.reshape(-1).view(np.uint8)
    return out


def decode_optimizer_state(blob, optimizer):
    """Reads what encode_optimizer_state wrote (another peer's, so checked as untrusted input):
    returns {parameter: {key: value}} for `optimizer`'s parameters, tensors on their devices (a
    one-element tensor, such as Adam's step, stays on the CPU as torch keeps it). Raises
    ValueError saying what does not fit: another optimizer class, another number of parameters,
    a tensor that is not the parameter's shape (or one element), a non-finite value, or a
    malformed blob."""
    blob = memoryview(blob).cast("B")
    if bytes(blob[:len(_OPT_MAGIC)]) != _OPT_MAGIC:
        raise ValueError("not a Rumor optimizer state (bad magic)")
    pos = len(_OPT_MAGIC)
    if len(blob) < pos + 4:
        raise ValueError("optimizer state truncated in its header")
    (hlen,) = struct.unpack("<I", blob[pos:pos + 4])
    pos += 4
    if hlen > len(blob) - pos:
        raise ValueError(f"optimizer state header of {hlen} bytes runs past the end ({len(blob)} bytes)")
    try:
        h = json.loads(bytes(blob[pos:pos + hlen]).decode())
        theirs, count, tensors, numbers = h["optimizer"], h["params"], h["tensors"], h["numbers"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"optimizer state header is malformed ({e})") from None
    data = blob[pos + hlen:]
    ours = type(optimizer).__name__
    if theirs != ours:
        raise ValueError(f"the swarm's member uses optimizer {theirs!s:.64}, this peer {ours}")
    params = _opt_params(optimizer)
    if count != len(params):
        raise ValueError(f"the member's optimizer updates {count!s:.32} parameters, this one {len(params)}")
    state = {}

    def slot(i, key):
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(params) or not isinstance(key, str):
            raise ValueError(f"optimizer state entry for parameter {i!s:.32} / {key!s:.64} is out of range")
        st = state.setdefault(params[i], {})
        if key in st:
            raise ValueError(f"optimizer state gives '{key:.64}' of parameter {i} twice")
        return params[i], st

    for e in tensors:
        try:
            i, key, dtype, shape, off, n = e
            shape = tuple(int(d) for d in shape)
        except (ValueError, TypeError):
            raise ValueError(f"optimizer state tensor entry {str(e):.100} is malformed") from None
        p, st = slot(i, key)
        if dtype not in _OPT_DTYPES:
            raise ValueError(f"'{key}' of parameter {i}: dtype {dtype!s:.32} is not one Rumor carries")
        numel = math.prod(shape)
        if any(d < 0 for d in shape) or not (shape == tuple(p.shape) or numel == 1):
            raise ValueError(f"'{key}' of parameter {i} has shape {list(shape)}, the parameter {list(p.shape)}")
        t = torch.empty(shape, dtype=_OPT_DTYPES[dtype])
        width = t.element_size()
        if not (isinstance(off, int) and isinstance(n, int) and 0 <= off and n == numel * width
                and off + n <= len(data)):
            raise ValueError(f"'{key}' of parameter {i}: bytes [{off!s:.20}, +{n!s:.20}) do not fit its "
                             f"{numel} x {width} bytes inside the {len(data)} bytes of data")
        raw = np.frombuffer(data[off:off + n], dtype=np.uint8).copy()
        view = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        view.reshape(-1).numpy().view(np.uint8)[:] = raw
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"'{key}' of parameter {i} holds non-finite values (NaN or Inf)")
        per_element = shape == tuple(p.shape)  # a moment or buffer; else one element, such as Adam's step
        st[key] = t.to(p.device) if per_element and p.device.type != "cpu" else t
    for e in numbers:
        try:
            i, key, v = e
        except (ValueError, TypeError):
            raise ValueError(f"optimizer state number entry {str(e):.100} is malformed") from None
        p, st = slot(i, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"'{key}' of parameter {i}: {v!s:.32} is not a finite number")
        st[key] = v
    return state


def decode_scheduler_states(blob):
    """The LR schedulers' states that encode_optimizer_state wrote: [[class name, {key: value}],
    ...] (plain JSON values; [] when there are none). ValueError for a malformed blob."""
    blob = memoryview(blob).cast("B")
    if bytes(blob[:len(_OPT_MAGIC)]) != _OPT_MAGIC or len(blob) < len(_OPT_MAGIC) + 4:
        raise ValueError("not a Rumor optimizer state (bad magic)")
    pos = len(_OPT_MAGIC)
    (hlen,) = struct.unpack("<I", blob[pos:pos + 4])
    try:
        h = json.loads(bytes(blob[pos + 4:pos + 4 + hlen]).decode())
        out = h.get("schedulers", [])
        if not isinstance(out, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                                                and isinstance(x[1], dict) for x in out):
            raise ValueError("schedulers is not a list of [name, state]")
    except (ValueError, UnicodeDecodeError, AttributeError) as e:
        raise ValueError(f"optimizer state header is malformed ({e})") from None
    return out


def _load_scheduler_state(sched, theirs):
    """Loads another peer's scheduler state into `sched`: only the keys our own state_dict has,
    each of the same kind (a number for a number, a list of as many numbers for a list), so an
    untrusted member sets nothing else. Then the learning rates it had: the schedule goes on
    from there. Raises ValueError when nothing fits (another class)."""
    name, state = theirs
    if name != type(sched).__name__:
        raise ValueError(f"the member's scheduler is a {name:.64}, this one a {type(sched).__name__}")
    ours = sched.state_dict()
    take = {}
    for k, v in state.items():
        if k not in ours or k == "lr_lambdas":
            continue
        mine = ours[k]
        if isinstance(mine, bool) or isinstance(v, bool):
            ok = isinstance(mine, bool) and isinstance(v, bool)
        elif isinstance(mine, (int, float)):
            ok = isinstance(v, (int, float)) and math.isfinite(v) and (isinstance(v, int) or not isinstance(mine, int))
        elif isinstance(mine, list):
            ok = (isinstance(v, list) and len(v) == len(mine)
                  and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v))
        else:
            ok = False
        if ok:
            take[k] = v
    sched.load_state_dict(dict(ours, **take))
    last = take.get("_last_lr")
    if last is not None:
        for g, lr in zip(sched.optimizer.param_groups, last):
            g["lr"] = lr


class _Sync:
    """The step protocol shared by GossipOptimizer and ParamAverager."""

    def __init__(self, peer, layout, model, samples_per_step):
        if not isinstance(peer, Peer):
            raise TypeError("peer must be a rumor.Peer")
        if peer.bound:
            raise RumorError("this peer already has a model: one model per peer")
        self.peer, self.layout, self.model = peer, layout, model
        self.samples_per_step = None if samples_per_step is None else int(samples_per_step)
        self.batch_samples = 0  # samples of the training forward passes since the last step
        if self.samples_per_step is None and isinstance(model, nn.Module):
            model.register_forward_pre_hook(self._count_batch)
        flat = peer.bind(layout.fingerprint, layout.size)
        layout.bind(flat)
        layout.copy_in()  # our initialisation, until (and unless) the swarm's model replaces it
        peer._settle_hook = self.serve  # close() settles the live parameters too, not the buffer alone
        self._last = None
        self.joined = False
        self.rumor_seconds = 0.0  # time spent in Rumor's part of step() (samples/s overhead)

    def _count_batch(self, module, args):
        """A training forward pass (train mode, gradients on): its batch is the first dimension of
        its first tensor argument."""
        if module.training and torch.is_grad_enabled() and args and torch.is_tensor(args[0]) and args[0].dim() > 0:
            self.batch_samples += int(args[0].shape[0])

    def join(self, timeout):
        step = self.peer.join(timeout)
        self.layout.copy_out()  # the swarm's model (or our own, if we are the first)
        self.peer.model_copied()  # until the first step, the peer answers the swarm in the background
        self.joined = True
        return step

    def before_update(self):
        self._t0 = time.perf_counter()
        self.layout.check(self.model)
        delta = self.peer.begin_step()
        if delta is not None:
            self.layout.add(delta)
        self.rumor_seconds += time.perf_counter() - self._t0

    def serve(self, seconds=None, max_seconds=None):
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
        if samples is None:
            samples = self.samples_per_step or self.batch_samples or 1
        self.batch_samples = 0
        delta = self.peer.end_step(0.0 if loss is None else float(loss), seconds, int(samples))
        if delta is not None:
            self.layout.add(delta)
        self._last = time.perf_counter()
        self.rumor_seconds += self._last - t0


class GossipOptimizer(torch.optim.Optimizer):
    """Wraps a torch.optim optimizer, and is one: torch's LR schedulers take it directly
    (StepLR(opt, ...)), and param_groups, state, defaults, zero_grad, state_dict and
    load_state_dict are the wrapped optimizer's own (the same objects). step() is a local step
    and, every local_steps steps, an exchange with a random neighbour; what neighbours mixed in
    since the last step is added to the parameters first (the overlap rule).

    optimizer  any torch.optim optimizer over the model's parameters.
    peer       a rumor.Peer (not yet bound to a model).
    model      the nn.Module (names its parameters for the fingerprint, finds the C++-compatible
               layout, and counts the samples of each training batch); None: the optimizer's
               parameters, in order.
    samples_per_step  samples in a batch (the "samples" mix weight and samples/s use it); None:
               counted from the model's training forward passes since the last step (the first
               dimension of the first tensor argument), or 1 without a model.
    share_state_every  seconds between publications of the optimizer's state (momentum, Adam's
               moments and step) and of the added schedulers' state to the peer, which sends the
               last one to a joiner that takes its model from us; 0 or None: never (joiners then
               start their optimizer fresh).
    swarm_epochs, swarm_samples, train_set_size  a swarm-wide budget, as rumor.Peer's: `.done`
               says when the swarm as a whole has processed it (stop then), `.swarm_progress` how
               far it is.

    The learning rate of each step is the param groups' (your schedulers') times
    peer.lr_scale(): the peers training now over the most seen (lr_follows_peers, on by default),
    so that a peer whose neighbours finished or died does not train on alone at n peers' rate.
    """

    def __init__(self, optimizer, peer, model=None, loss="ce", fingerprint="auto", samples_per_step=None,
                 share_state_every=1.0, swarm_epochs=None, swarm_samples=None, train_set_size=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer")
        if isinstance(optimizer, GossipOptimizer):
            raise TypeError("optimizer is already a GossipOptimizer")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        layout = ModelLayout(model, params if model is None else None, loss, fingerprint)
        if model is not None:
            mine = {id(t) for _, t, *_ in layout.entries}
            missing = [i for i, p in enumerate(params) if id(p) not in mine]
            if missing:
                raise ValueError(f"the optimizer updates {len(missing)} tensor(s) that are not parameters of "
                                 "`model`: their values would never be averaged")
        if share_state_every is not None and not share_state_every >= 0:
            raise ValueError(f"share_state_every {share_state_every!r}: expected seconds >= 0 (0 or None: never)")
        # torch.optim.Optimizer.__init__ is not called: the wrapped optimizer holds the param
        # groups and the state, and these properties show them. The hook tables newer torch
        # versions keep on every optimizer are made empty here.
        self.optimizer = optimizer
        for hooks in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                      "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                      "_optimizer_load_state_dict_post_hooks"):
            setattr(self, hooks, collections.OrderedDict())
        self._zero_grad_profile_name = f"Optimizer.zero_grad#{type(self).__name__}.zero_grad"
        if swarm_epochs is not None or swarm_samples is not None:
            peer.set_swarm_budget(swarm_epochs, swarm_samples, train_set_size)
        self._sync = _Sync(peer, layout, model, samples_per_step)
        self.peer = peer
        self.layout = layout
        self._share_every = share_state_every or 0.0
        self._published_at = None
        self._stepped = False  # a step since the last publication
        self._schedulers = []
        self._swarm_schedulers = []  # what our join brought, for schedulers added after it
        # After join(): "swarm" when the optimizer state came with the model, else why not.
        self.optimizer_state_from = None

    # The wrapped optimizer's own objects (its load_state_dict replaces them: read them anew).
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self.optimizer.defaults = value

    def join(self, timeout=60.0):
        """Joins the swarm (bounded: at most `timeout` s) and takes its model, its step and the
        optimizer state of the member that sent them (if that member publishes one and it fits
        this optimizer: else this optimizer starts fresh, with an OptimizerStateWarning when the
        state was there but unusable), and its LR schedulers' state (loaded into those added with
        add_scheduler(), now or when they are added), before the first local step. Returns the
        swarm's step (0: a new swarm, or one that has not trained)."""
        step = self._sync.join(timeout)
        if step > 0:
            self._take_optimizer_state()
        else:
            self.optimizer_state_from = "fresh: the swarm had not trained yet"
        return step

    def _take_optimizer_state(self):
        blob = self.peer.received_extra_state()
        if not blob:
            self.optimizer_state_from = "fresh: the member that sent the model sent no optimizer state"
            return
        try:
            state = decode_optimizer_state(blob, self.optimizer)
            schedulers = decode_scheduler_states(blob)
        except ValueError as e:
            self.optimizer_state_from = f"fresh: {e}"
            warnings.warn(f"rumor: the optimizer state that came with the swarm's model was not used ({e}); this "
                          "peer's optimizer starts fresh and training goes on", OptimizerStateWarning, stacklevel=3)
            return
        for p, st in state.items():
            self.optimizer.state[p] = st
        self.optimizer_state_from = "swarm"
        self._swarm_schedulers = schedulers
        for i, sched in enumerate(self._schedulers):
            self._take_scheduler_state(i, sched)

    def _take_scheduler_state(self, i, sched):
        if i >= len(self._swarm_schedulers):
            return
        try:
            _load_scheduler_state(sched, self._swarm_schedulers[i])
        except (ValueError, TypeError, KeyError) as e:
            warnings.warn(f"rumor: the swarm's LR scheduler state was not used ({e}); this peer's schedule "
                          "starts fresh", OptimizerStateWarning, stacklevel=3)

    def add_scheduler(self, scheduler):
        """Makes `scheduler` (any torch LR scheduler over this optimizer) travel with the
        optimizer state: its state is published with it, and a joiner's scheduler takes the
        swarm's (its position, base and last learning rates), so its schedule continues where
        the member that sent the model was. Returns the scheduler:
        `sched = opt.add_scheduler(StepLR(opt, step_size=1, gamma=0.7))`."""
        if getattr(scheduler, "optimizer", None) not in (self, self.optimizer):
            raise ValueError("the scheduler does not drive this optimizer (build it on the GossipOptimizer)")
        self._schedulers.append(scheduler)
        self._take_scheduler_state(len(self._schedulers) - 1, scheduler)
        return scheduler

    def publish_state(self):
        """Publishes the optimizer's (and the added schedulers') state now (step() does it every
        share_state_every seconds): what a joiner that takes its model from this peer gets."""
        self.peer.set_extra_state(encode_optimizer_state(self.optimizer, self._schedulers))
        self._published_at = time.monotonic()
        self._stepped = False

    def _maybe_publish(self):
        if self._share_every and self._stepped and (
                self._published_at is None or time.monotonic() - self._published_at >= self._share_every):
            self.publish_state()

    def step(self, closure=None, loss=None, samples=None):
        """The overlap rule, then the wrapped optimizer's step, then the peer's: copy the
        parameters in, start an exchange when due, wait if the staleness bound says so.
        `loss` (optional) is checked: a non-finite one ends training as rumor-peer's does
        (rumor.Diverged at the next step). `samples` (optional) overrides the batch size counted
        from the model's forward passes."""
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._sync.before_update()
        scale = self.peer.lr_scale()
        if scale != 1.0:  # the groups' own rates stay as the schedulers set them
            rates = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * scale
            try:
                out = self.optimizer.step()
            finally:
                for g, lr in zip(self.optimizer.param_groups, rates):
                    g["lr"] = lr
        else:
            out = self.optimizer.step()
        self._sync.after_update(loss, samples)
        self._stepped = True
        if self._share_every:
            t0 = time.perf_counter()
            self._maybe_publish()
            self._sync.rumor_seconds += time.perf_counter() - t0
        return loss if closure is not None else out

    @property
    def done(self):
        """True once the swarm-wide budget is reached (rumor.Peer.done); False without one."""
        return self.peer.done

    @property
    def swarm_progress(self):
        """The swarm's progress towards its budget in [0, 1] (rumor.Peer.swarm_progress)."""
        return self.peer.swarm_progress

    def serve(self, seconds=None, max_seconds=None):
        """Answers the swarm for `seconds` (up to max_seconds while a peer is still training)
        without training (see rumor.Peer.serve); what was mixed in meanwhile is applied to the
        parameters. The optimizer state is published first if it changed since the last time."""
        if self._share_every and self._stepped:
            self.publish_state()
        self._sync.serve(seconds, max_seconds)

    def close(self, timeout=5.0, settle=True):
        """Ends training: settles with the swarm first (the default, as rumor-peer does; the
        mixes reach the parameters) and says so, then leaves gracefully (rumor.Peer.close)."""
        if self._share_every and self._stepped and not self.peer.closed:
            self.publish_state()
        self.peer.close(timeout=timeout, settle=settle)

    def report(self, test_acc, loss=float("nan"), epoch=0.0):
        """An "eval" metrics line (rumor.Peer.report); the time since the last step is not
        counted as training time (samples/s)."""
        self._sync.report(test_acc, loss, epoch)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        """The wrapped optimizer's state_dict(): torch.save it, load it into this or another
        GossipOptimizer (or into the bare optimizer)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group):
        raise RumorError("a GossipOptimizer's parameters are fixed when it is bound to its peer (the flat layout "
                         "and the fingerprint): build a new peer and optimizer for new parameters")

    @property
    def rumor_seconds(self):
        """Seconds spent in Rumor's part of step() (the protocol, the copies, staleness waits)."""
        return self._sync.rumor_seconds

    def __repr__(self):
        return f"GossipOptimizer({self.optimizer!r}, peer={self.peer!r})"

    def __getstate__(self):
        raise TypeError("a GossipOptimizer holds a live peer and cannot be pickled: save its state_dict()")

    def __getattr__(self, name):
        if name in ("optimizer", "_sync", "peer", "layout", "_share_every", "_published_at", "_stepped",
                    "_schedulers", "_swarm_schedulers"):
            raise AttributeError(name)
        return getattr(self.optimizer, name)


class swarm:
    """The lifecycle of a torch training loop in a swarm, as a context manager:

        with rumor.torch.swarm(model, optimizer) as opt:     # joins (bounded)
            sched = opt.add_scheduler(StepLR(opt, step_size=1, gamma=0.7))
            ... your loop, opt.step() ...
        # leaving the block settles with the swarm (as rumor-peer does), then leaves

    model, optimizer  your nn.Module and its torch.optim optimizer (wrapped in a GossipOptimizer,
                 which the block gives you).
    peer         a rumor.Peer; None: rumor.Peer.from_env(**peer_args) (rumor-run's variables).
    join_timeout seconds join() may take.
    settle       settle before leaving (True: the peer's settle settings).
    loss, fingerprint, samples_per_step, share_state_every: as GossipOptimizer's.
    **peer_args  rumor.Peer's arguments and knobs (local_steps=4, metrics="p1.jsonl", ...).
    On entering, one line on stderr says how the peer started (a new swarm, or the step and the
    optimizer state it joined with); on leaving, one says it settles. An exception (Ctrl-C, a
    SIGTERM under rumor-run) leaves at once, without settling.
    """

    def __init__(self, model, optimizer, peer=None, join_timeout=60.0, settle=True, loss="ce", fingerprint="auto",
                 samples_per_step=None, share_state_every=1.0, **peer_args):
        if peer is not None and peer_args:
            raise TypeError("give either a peer or rumor.Peer's arguments, not both")
        self.peer = peer if peer is not None else Peer.from_env(**peer_args)
        self.optimizer = GossipOptimizer(optimizer, self.peer, model=model, loss=loss, fingerprint=fingerprint,
                                         samples_per_step=samples_per_step, share_state_every=share_state_every)
        self.join_timeout = join_timeout
        self.settle = settle
        self.step = None

    def __enter__(self):
        try:
            self.step = self.optimizer.join(self.join_timeout)
        except BaseException:
            self.peer.close(settle=False)
            raise
        k, n = self.peer.shard
        if self.step > 0:
            self.peer._say(f"joined the swarm at step {self.step} (shard {k}/{n}, listening on {self.peer.address}): "
                           f"its model, optimizer state: {self.optimizer.optimizer_state_from}")
        else:
            self.peer._say(f"in the swarm (shard {k}/{n}, listening on {self.peer.address}), training from step 0")
        return self.optimizer

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.optimizer.close(settle=self.settle)
        else:
            self.peer.close(settle=False)
        return False


class ShardSampler(torch.utils.data.Sampler):
    """This peer's shard of a torch Dataset, as DistributedSampler gives each rank its part:
    `DataLoader(dataset, batch_size=64, sampler=rumor.torch.ShardSampler(dataset))`.

    shard    (K, N): the K-th of N equal parts (1-based); None: RUMOR_SHARD (rumor-run), or
             (1, 1) outside it.
    seed     the shards are cut from one permutation of the whole dataset drawn from `seed`, the
             same on every peer: they are disjoint and cover it (sizes differ by at most one).
    shuffle  the shard's order is reshuffled at every pass (seeded by seed, K and the pass, or
             set_epoch(e)); False: in dataset order.
    Unlike DistributedSampler, a peer keeps its shard for the whole run (as each machine keeps
    its own data in a swarm), and nothing is padded: shards may differ by one sample.
    """

    def __init__(self, dataset, shard=None, seed=0, shuffle=True):
        k, n = shard if shard is not None else shard_from_env()
        if not (1 <= int(k) <= int(n)):
            raise ValueError(f"shard {k}/{n}: expected 1 <= K <= N")
        self.k, self.n, self.seed, self.shuffle = int(k), int(n), int(seed), bool(shuffle)
        total = len(dataset)
        perm = torch.randperm(total, generator=torch.Generator().manual_seed(self.seed))
        self.indices = perm[(self.k - 1) * total // self.n:self.k * total // self.n].sort().values.tolist()
        self.epoch = None
        self._passes = 0

    def set_epoch(self, epoch):
        """The order of the next pass, as DistributedSampler.set_epoch (optional: passes are
        counted anyway)."""
        self.epoch = int(epoch)

    def __iter__(self):
        e = self.epoch if self.epoch is not None else self._passes
        self._passes += 1
        if not self.shuffle:
            return iter(self.indices)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.k * 7919 + e)
        return iter([self.indices[i] for i in torch.randperm(len(self.indices), generator=g).tolist()])

    def __len__(self):
        return len(self.indices)


class ParamAverager:
    """For loops that update parameters themselves: call step() after each local update."""

    def __init__(self, model, peer, loss="ce", fingerprint="auto", samples_per_step=None):
        if isinstance(model, nn.Module):
            layout = ModelLayout(model, None, loss, fingerprint)
        else:
            model = list(model)
            layout = ModelLayout(None, model, loss, fingerprint)
            model = None
        if swarm_epochs is not None or swarm_samples is not None:
            peer.set_swarm_budget(swarm_epochs, swarm_samples, train_set_size)
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

    @property
    def done(self):
        """True once the swarm-wide budget is reached (rumor.Peer.done); False without one."""
        return self.peer.done

    @property
    def swarm_progress(self):
        """The swarm's progress towards its budget in [0, 1] (rumor.Peer.swarm_progress)."""
        return self.peer.swarm_progress

    def serve(self, seconds=None, max_seconds=None):
        """Answers the swarm for `seconds` without training (see rumor.Peer.serve)."""
        self._sync.serve(seconds, max_seconds)

    def report(self, test_acc, loss=float("nan"), epoch=0.0):
        """An "eval" metrics line (rumor.Peer.report), as GossipOptimizer.report."""
        self._sync.report(test_acc, loss, epoch)
