"""rumor.torch: the flat layout and fingerprint (the same as the C++ models' for the equivalent
nn.Sequential), the checks on models that cannot be averaged, and small swarms of torch peers."""
import json
import math
import struct
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import rumor  # noqa: E402
import rumor.torch as rt  # noqa: E402
from rumor import _rumor  # noqa: E402
from rumor.fingerprint import first_difference  # noqa: E402
from conftest import rel_distance, run_threads  # noqa: E402

torch.set_num_threads(1)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


class Tiny(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 4 * 4, hidden)
        self.out = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(torch.relu(self.conv(x)).flatten(1))))


def test_mlp_has_the_cpp_fingerprint_and_layout():
    torch.manual_seed(0)
    model = mlp()
    layout = rt.ModelLayout(model)
    assert layout.fingerprint == _rumor.dense_fingerprint("mlp:256,128", 784, 10)
    assert layout.fingerprint == "mlp:784-256-128-10/ce/p235146/f32"
    flat = np.zeros(layout.size, dtype=np.float32)
    layout.bind(flat)
    layout.copy_in()
    # Same loss and same gradient from the C++ model reading the flat buffer.
    x = torch.rand(16, 784)
    y = torch.randint(0, 10, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    c_loss, c_grad = _rumor.dense_loss_and_grad("mlp:256,128", flat, x.numpy(), y.numpy().astype(np.int32), 10)
    assert abs(c_loss - loss.item()) < 1e-5
    grads = np.zeros_like(flat)
    for name, t, off, n, tr in layout.entries:
        g = t.grad.detach()
        grads[off:off + n] = (g.t() if tr else g).contiguous().numpy().reshape(-1)
    assert rel_distance(grads, c_grad) < 1e-5
    # And back: the C++ initialisation copied out gives the torch model the C++ model's function.
    flat[:] = _rumor.dense_init("mlp:256,128", 784, 10, 3)
    layout.copy_out()
    with torch.no_grad():
        loss2 = nn.functional.cross_entropy(model(x), y).item()
    c_loss2, _ = _rumor.dense_loss_and_grad("mlp:256,128", flat, x.numpy(), y.numpy().astype(np.int32), 10)
    assert abs(c_loss2 - loss2) < 1e-5


def test_logreg_and_other_models_fingerprints():
    assert rt.ModelLayout(nn.Sequential(nn.Linear(64, 10))).fingerprint == _rumor.dense_fingerprint("logreg", 64, 10)
    assert rt.ModelLayout(nn.Sequential(nn.Linear(13, 1)), loss="mse").fingerprint == \
        _rumor.dense_fingerprint("linreg", 13, 1)
    f = rt.ModelLayout(Tiny()).fingerprint
    assert f == "torch:conv.weight=2x1x3x3,conv.bias=2,fc.weight=8x32,fc.bias=8,out.weight=2x8,out.bias=2/p302/f32"
    g = rt.ModelLayout(Tiny(hidden=9)).fingerprint
    assert first_difference(f, g) == "parameter 2: ours fc.weight shape 8 x 32, theirs fc.weight shape 9 x 32"
    assert "layer widths differ: ours 784-256-128-10, theirs 784-512-10" == first_difference(
        "mlp:784-256-128-10/ce/p235146/f32", "mlp:784-512-10/ce/p407050/f32")
    # BatchNorm statistics travel with the model; the step counter stays local.
    bn = rt.ModelLayout(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)))
    assert "buffer:1.running_mean=2" in bn.fingerprint and "num_batches" not in bn.fingerprint
    # A huge model: hashed, still under the Hello's 1024 characters, still naming early entries.
    big = nn.Sequential(*[nn.Linear(4, 4) for _ in range(100)])
    fb = rt.ModelLayout(big, fingerprint="torch").fingerprint
    assert len(fb) <= 1024 and fb.startswith("torch#") and fb.endswith("/p2000/f32")


def test_models_that_cannot_be_averaged_are_refused_clearly():
    with pytest.raises(TypeError, match=r"parameter '0.weight' is float64"):
        rt.ModelLayout(nn.Sequential(nn.Linear(3, 2)).double())
    m = nn.Sequential(nn.Linear(3, 2))
    m[0].weight.data = torch.zeros(3, 2).t()  # right shape, transposed strides
    with pytest.raises(ValueError, match=r"parameter '0.weight' is not contiguous"):
        rt.ModelLayout(m)
    with pytest.raises(ValueError, match="loss"):
        rt.ModelLayout(Tiny(), loss="hinge")


def train_steps(opt, model, steps, x, y, sleep=0.0, report_loss=True):
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss=loss) if report_loss else opt.step()
        if sleep:
            time.sleep(sleep)
    return loss.item()


def data(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(32, 1, 6, 6, generator=g)
    return x, (x.mean((1, 2, 3)) > 0.5).long()


def test_a_model_changed_after_binding_is_a_clear_error():
    torch.manual_seed(1)
    model = Tiny()
    with rumor.Peer() as peer:
        opt = rt.GossipOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), peer, model=model)
        opt.join(5)
        x, y = data(1)
        train_steps(opt, model, 2, x, y)
        model.fc = nn.Linear(32, 8)  # a new layer: new tensors the peer does not know
        with pytest.raises(rt.ModelChanged, match="fc.weight"):
            train_steps(opt, model, 1, x, y)
    torch.manual_seed(1)
    model = Tiny()
    with rumor.Peer() as peer:
        opt = rt.GossipOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), peer, model=model)
        model.out.weight.data = torch.zeros(2, 9)
        with pytest.raises(rt.ModelChanged, match=r"parameter 'out.weight' changed .*\[2, 8\] -> \[2, 9\]"):
            opt.step()
        model.out.weight.data = torch.zeros(2, 8, dtype=torch.float64)
        with pytest.raises(TypeError, match="parameter 'out.weight' is float64"):
            opt.step()


def test_wrong_model_is_refused_naming_the_first_difference():
    a_model, c_model = Tiny(hidden=8), Tiny(hidden=9)
    a = rumor.Peer()
    opt_a = rt.GossipOptimizer(torch.optim.SGD(a_model.parameters(), lr=0.1), a, model=a_model)
    c = rumor.Peer(join=[a.address])
    opt_c = rt.GossipOptimizer(torch.optim.SGD(c_model.parameters(), lr=0.1), c, model=c_model)
    stop = [False]

    def serve():
        while not stop[0]:
            opt_a.serve(0.05)

    import threading
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with pytest.raises(rumor.FingerprintMismatch,
                       match=r"parameter 2: ours fc.weight shape 9 x 32, theirs fc.weight shape 8 x 32"):
        opt_c.join(8)
    stop[0] = True
    t.join(5)
    a.close(settle=False)
    c.close(settle=False)


def test_nan_from_a_torch_model_is_refused_and_training_goes_on():
    torch.manual_seed(3)
    models = [Tiny() for _ in range(3)]
    peers = [rumor.Peer(exchange_timeout=1.0, seed=1)]
    opts = [rt.GossipOptimizer(torch.optim.SGD(models[0].parameters(), lr=0.05), peers[0], model=models[0])]
    for i in (1, 2):  # a peer listens once its model is bound: join through peer 0's address
        peers.append(rumor.Peer(join=[peers[0].address], exchange_timeout=1.0, seed=1 + i))
        opts.append(rt.GossipOptimizer(torch.optim.SGD(models[i].parameters(), lr=0.05), peers[i], model=models[i]))

    def run(i):
        opts[i].join(10)
        x, y = data(10 + i)
        end = time.monotonic() + 20
        while peers[i].stats()["peers"] < 3 and time.monotonic() < end:
            train_steps(opts[i], models[i], 1, x, y, 0.003)
        if i == 2:  # goes on gossiping its broken model (its loss is not reported: see below)
            with torch.no_grad():
                models[i].fc.weight[0, 0] = float("nan")
        losses = [train_steps(opts[i], models[i], 1, x, y, 0.003, report_loss=i != 2) for _ in range(150)]
        return losses

    results = run_threads([lambda i=i: run(i) for i in range(3)], 80)
    for i in (0, 1):
        for n, p in models[i].named_parameters():
            assert torch.isfinite(p).all(), f"peer {i}: {n} took the NaN in"
        assert len(results[i]) == 150 and all(math.isfinite(x) for x in results[i]), f"peer {i} stopped or broke"
    rejected = sum(peers[i].stats()["rejected"] for i in (0, 1))
    assert rejected > 0, "the healthy peers should have refused the NaN model"
    assert sum(peers[i].stats()["exchanges"] for i in (0, 1)) > 0
    # A peer that reports its non-finite loss stops exchanging, as rumor-peer does (exit 1).
    x, y = data(12)
    with pytest.raises(rumor.Diverged):
        train_steps(opts[2], models[2], 2, x, y)
    for p in peers:
        p.close(settle=False)


def test_gossip_optimizer_two_peers_train_and_agree():
    torch.manual_seed(4)
    models = [Tiny(), Tiny()]
    peers = [rumor.Peer(local_steps=2, staleness=2, seed=1)]
    opts = [rt.GossipOptimizer(torch.optim.Adam(models[0].parameters(), lr=0.01), peers[0], model=models[0],
                               samples_per_step=32)]
    peers.append(rumor.Peer(join=[peers[0].address], local_steps=2, staleness=2, seed=2))
    opts.append(rt.GossipOptimizer(torch.optim.Adam(models[1].parameters(), lr=0.01), peers[1], model=models[1],
                                   samples_per_step=32))
    x, y = data(20)
    # Both start stepping once both have joined: a joiner takes the clock of the member it got the
    # model from, and with a head start of more than TAU steps there, its last steps would wait on
    # the first peer, whose thread ends after 121 steps of its own without closing (stepping up to
    # the same clock, or close(), which says the peer is done, would free it).
    joined = threading.Barrier(2, timeout=30)
    starts = [None, None]

    def run(i):
        starts[i] = opts[i].join(10)
        joined.wait()
        first = train_steps(opts[i], models[i], 1, x, y)
        last = train_steps(opts[i], models[i], 120, x, y, 0.002)
        opts[i].serve(1.0)
        return first, last

    res = run_threads([lambda i=i: run(i) for i in range(2)], 60)
    assert starts == [0, 0], starts
    for first, last in res:
        assert last < first * 0.8
    flat = [torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy() for m in models]
    assert rel_distance(flat[0], flat[1]) < 0.05
    for p in peers:
        s = p.stats()
        assert s["exchanges"] > 10 and s["samples"] == 121 * 32
        p.close(settle=False)


def test_a_learning_rate_schedule_on_the_wrapped_optimizer_is_the_rate_used():
    # torch's schedulers take the wrapped optimizer (docs/python.md); GossipOptimizer.step() must
    # then train at the scheduled rate: here 0 after 5 steps, so a peer alone stops moving.
    import warnings
    torch.manual_seed(5)
    model = Tiny()
    with rumor.Peer(seed=3, settle=0) as peer:
        inner = torch.optim.Adam(model.parameters(), lr=0.01)
        opt = rt.GossipOptimizer(inner, peer, model=model, samples_per_step=32)
        sched = torch.optim.lr_scheduler.LambdaLR(inner, lambda k: 1.0 if k < 5 else 0.0)
        opt.join(5)
        x, y = data(21)
        flat = lambda: torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            before = flat()
            for _ in range(5):
                train_steps(opt, model, 1, x, y)
                sched.step()
            moved = flat()
            for _ in range(5):
                train_steps(opt, model, 1, x, y)
                sched.step()
            after = flat()
        assert not [w for w in caught if "lr_scheduler" in str(w.message)], [str(w.message) for w in caught]
        assert float((moved - before).abs().max()) > 1e-3
        assert torch.equal(after, moved)
        assert inner.param_groups[0]["lr"] == 0.0 and opt.param_groups[0]["lr"] == 0.0


def test_the_peer_that_finished_first_takes_in_the_stragglers_last_steps():
    # Both train 40 steps; the second is slow. The first serves (up to max_seconds) while the
    # other is behind its clock, and `seconds` more once it caught up: both end on one model.
    torch.manual_seed(6)
    models = [Tiny(), Tiny()]
    peers, opts = [], []
    for i, m in enumerate(models):
        # min_peers=2: both start at step 0, so "behind" means still training
        peers.append(rumor.Peer(join=[peers[0].address] if peers else [], seed=i + 1, min_peers=2))
        opts.append(rt.GossipOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), peers[-1], model=m,
                                       samples_per_step=32))
    x, y = data(22)
    t_trained, t_end = [0.0, 0.0], [0.0, 0.0]

    def run(i):
        opts[i].join(10)
        train_steps(opts[i], models[i], 40, x, y, 0.0 if i == 0 else 0.03)
        t_trained[i] = time.monotonic()
        opts[i].serve(0.5, max_seconds=30)
        t_end[i] = time.monotonic()

    run_threads([lambda i=i: run(i) for i in range(2)], 60)
    flat = [torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy() for m in models]
    assert t_trained[1] > t_trained[0] + 0.5  # the second was the straggler
    # The first served while the straggler trained, and 0.5 s more after its last step (it
    # learns of that step only after it was taken), not only until it caught up.
    assert t_end[0] >= t_trained[1] + 0.4  # (its last step came 0.03 s before t_trained)
    assert t_end[0] < t_trained[1] + 5
    assert rel_distance(flat[0], flat[1]) < 1e-6
    for p in peers:
        p.close(settle=False)


def test_a_joiner_gets_the_members_optimizer_state_with_its_model():
    """join() brings the optimizer state (Adam's moments and step) of the member that sent the
    model, from the same moment; an optimizer of another kind starts fresh, with a warning, and
    trains on."""
    torch.manual_seed(7)
    x, y = data(21)
    src_model = Tiny()
    src_peer = rumor.Peer(seed=11)
    src = rt.GossipOptimizer(torch.optim.Adam(src_model.parameters(), lr=0.01), src_peer, model=src_model,
                             share_state_every=0)  # published by hand below, at a known moment
    src.join(5)
    train_steps(src, src_model, 30, x, y)
    src.publish_state()
    expected = {i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in src.state[p].items()}
                for i, p in enumerate(src_model.parameters())}
    assert expected[0]["step"] == 30
    done = threading.Event()

    def answer():  # the member answers the joiners' state requests meanwhile (at most 20 s)
        for _ in range(100):
            if done.is_set():
                return
            src.serve(0.2)

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        models, opts = [], []
        for seed, make in ((12, lambda ps: torch.optim.Adam(ps, lr=0.01)), (13, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))):
            m = Tiny()
            o = rt.GossipOptimizer(make(m.parameters()), rumor.Peer(join=[src_peer.address], seed=seed), model=m)
            models.append(m)
            opts.append(o)
        adam, sgd = opts
        assert adam.join(10) == 30
        assert adam.optimizer_state_from == "swarm"
        for i, p in enumerate(models[0].parameters()):
            got = adam.state[p]
            assert sorted(got) == sorted(expected[i])
            for k, v in expected[i].items():
                assert torch.equal(got[k], v), f"{k} of parameter {i} differs from the member's"
        with pytest.warns(rt.OptimizerStateWarning, match="uses optimizer Adam, this peer SGD"):
            assert sgd.join(10) == 30
        assert sgd.optimizer_state_from.startswith("fresh: ")
        assert len(sgd.state) == 0
        # Both train on from there: Adam continues its step count, SGD builds its momentum.
        first = [train_steps(o, m, 1, x, y) for o, m in zip(opts, models)]
        last = [train_steps(o, m, 20, x, y) for o, m in zip(opts, models)]
        assert all(math.isfinite(v) for v in first + last)
        assert int(adam.state[next(models[0].parameters())]["step"]) == 51
        assert "momentum_buffer" in sgd.state[next(models[1].parameters())]
    finally:
        done.set()
        server.join(30)
        for o in opts:
            o.peer.close(settle=False)
        src_peer.close(settle=False)


def test_optimizer_state_from_another_member_is_checked_as_untrusted_input():
    torch.manual_seed(8)
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = data(3)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    good = bytes(rt.encode_optimizer_state(opt))
    assert rt.encode_optimizer_state(torch.optim.Adam(Tiny().parameters())) == b""  # no state before a step
    fresh = torch.optim.Adam(model.parameters())
    state = rt.decode_optimizer_state(good, fresh)
    assert len(state) == len(list(model.parameters()))
    head = len(b"RUMOR-OPTIM-1\n")
    (hlen,) = struct.unpack("<I", good[head:head + 4])
    header = json.loads(good[head + 4:head + 4 + hlen])

    def with_header(h, data=None):
        hb = json.dumps(h).encode()
        return good[:head] + struct.pack("<I", len(hb)) + hb + (good[head + 4 + hlen:] if data is None else data)

    def bad(blob, match):
        with pytest.raises(ValueError, match=match):
            rt.decode_optimizer_state(blob, fresh)

    bad(b"not a state", "bad magic")
    bad(good[:head + 2], "truncated")
    bad(good[:head] + b"\xff\xff\xff\x7f" + good[head + 4:], "runs past the end")
    bad(with_header({"optimizer": "Adam"}), "malformed")
    bad(with_header(dict(header, params=99)), "updates 99 parameters")
    t = [list(e) for e in header["tensors"]]
    t[0][3] = [2, 2]  # a moment that is not its parameter's shape
    bad(with_header(dict(header, tensors=t)), "has shape")
    t = [list(e) for e in header["tensors"]]
    t[0][5] += 4  # the byte length does not match the shape
    bad(with_header(dict(header, tensors=t)), "do not fit")
    t = [list(e) for e in header["tensors"]]
    t[0][0] = 40  # no such parameter
    bad(with_header(dict(header, tensors=t)), "out of range")
    bad(with_header(header, good[head + 4 + hlen:-8]), "do not fit")  # data cut short
    nan = bytearray(good)
    e = header["tensors"][1]
    nan[head + 4 + hlen + e[4]:head + 4 + hlen + e[4] + 4] = np.float32("nan").tobytes()
    bad(bytes(nan), "non-finite")
    assert opt.state[next(model.parameters())]["step"] == 3  # nothing was touched


def _staged_and_direct(make):
    """Two copies of one model, one through the staging buffer that GPU tensors use (forced here
    on CPU tensors: the same views, copies and adds, with nothing to synchronize), one direct."""
    torch.manual_seed(11)
    a = make()
    b = make()
    b.load_state_dict(a.state_dict())
    direct, staged = rt.ModelLayout(a), rt.ModelLayout(b)
    assert not staged._staged
    staged._staged = True
    fa, fb = np.zeros(direct.size, np.float32), np.zeros(staged.size, np.float32)
    direct.bind(fa)
    staged.bind(fb)
    assert staged._host is not None and staged._host.data_ptr() != torch.from_numpy(fb).data_ptr()
    return (a, direct, fa), (b, staged, fb)


@pytest.mark.parametrize("make", [mlp, lambda: nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.Flatten(),
                                                              nn.Linear(3 * 4 * 4, 2))], ids=["mlp", "cnn_bn"])
def test_the_staged_copies_gpu_tensors_take_give_the_direct_numbers(make):
    (a, direct, fa), (b, staged, fb) = _staged_and_direct(make)
    values = lambda m: torch.cat([t.detach().reshape(-1) for t in list(m.parameters()) + list(m.buffers())
                                  if t.is_floating_point()])
    direct.copy_in()
    staged.copy_in()
    assert np.array_equal(fa, fb) and np.abs(fa).sum() > 0  # C++ reads the same flat buffer
    delta = np.random.default_rng(3).standard_normal(direct.size).astype(np.float32)
    direct.add(delta)
    staged.add(delta)
    assert torch.equal(values(a), values(b))  # a mix applied alike (transposed layers included)
    # (positive: a state transfer clamps BatchNorm's running variances at 0, and must round-trip)
    fa[:] = fb[:] = np.abs(np.random.default_rng(4).standard_normal(direct.size)).astype(np.float32)
    direct.copy_out()
    staged.copy_out()
    assert torch.equal(values(a), values(b))  # a state transfer taken alike
    staged.copy_in()
    assert np.array_equal(fb, fa)  # and it round-trips


def test_batchnorm_statistics_travel_but_a_mix_does_not_land_in_them():
    # A mix lands as live += delta. Through a lossy codec the delta of a running statistic carries
    # its block's quantisation error (the scale is set by the weights and means beside it), and
    # after training nothing refreshes it: a 4-peer torch CNN at int8 ended one peer at accuracy
    # 0.10 (loss NaN: a variance below zero) and at int4 two at 0.63-0.64 on the testbed. The
    # statistics stay the peer's own under a mix; they still travel (the fingerprint, and a
    # joiner's state transfer, which lands with any variance below zero clamped at 0).
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 4 * 4, 3),
                          nn.BatchNorm1d(3))
    layout = rt.ModelLayout(model)
    assert layout.statistics == ["buffer:1.running_mean", "buffer:1.running_var", "buffer:4.running_mean",
                                 "buffer:4.running_var"]
    assert "buffer:1.running_var=2" in layout.fingerprint
    flat = np.zeros(layout.size, np.float32)
    layout.bind(flat)
    model[1].running_var.fill_(0.01)
    model[1].running_mean.fill_(0.3)
    before = {n: t.detach().clone() for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    delta = np.zeros(layout.size, np.float32)
    offsets = {name: (off, n) for name, _, off, n, _ in layout.entries}
    for name, value in (("buffer:1.running_var", -0.03), ("buffer:1.running_mean", -1.0), ("1.weight", 0.5),
                        ("0.bias", -5.0)):
        off, n = offsets[name]
        delta[off:off + n] = value
    layout.add(delta)
    assert torch.allclose(model[0].bias, before["0.bias"] - 5.0)  # parameters take the mix
    assert torch.allclose(model[1].weight, before["1.weight"] + 0.5)  # BatchNorm's affine ones too
    for name in ("1.running_var", "1.running_mean", "4.running_var", "4.running_mean"):
        assert torch.equal(dict(model.named_buffers())[name], before[name]), name
    model.eval()
    assert torch.isfinite(model(torch.randn(4, 1, 6, 6))).all()
    # A state transfer replaces them (a variance below zero, from a sender without this rule, at 0).
    layout.copy_in()
    off, n = offsets["buffer:4.running_var"]
    flat[off:off + n] = [-1.0, 2.0, 0.5]
    off, n = offsets["buffer:1.running_mean"]
    flat[off:off + n] = [7.0, -7.0]
    layout.copy_out()
    assert model[4].running_var.tolist() == [0.0, 2.0, 0.5]
    assert model[1].running_mean.tolist() == [7.0, -7.0]
    assert torch.isfinite(model(torch.randn(4, 1, 6, 6))).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")
def test_cuda_peers_average_through_pinned_buffers_to_the_cpu_numbers():
    # Two peers, one model on the last GPU (not the current device: the copies must wait for
    # that device, not the current one) and one on the CPU: pure averaging (lr 0) gives both
    # the exact mean, and the GPU model's parameters stay on their device.
    dev = torch.device(f"cuda:{torch.cuda.device_count() - 1}")
    torch.manual_seed(12)
    models = [Tiny().to(dev), Tiny()]
    start = [torch.cat([p.detach().cpu().reshape(-1) for p in m.parameters()]) for m in models]
    mean = (start[0] + start[1]) / 2
    peers = [rumor.Peer(seed=1)]
    opts = [rt.GossipOptimizer(torch.optim.SGD(models[0].parameters(), lr=0.0), peers[0], model=models[0])]
    assert opts[0].layout._staged and opts[0].layout._host.is_pinned()
    peers.append(rumor.Peer(join=[peers[0].address], seed=2))
    opts.append(rt.GossipOptimizer(torch.optim.SGD(models[1].parameters(), lr=0.0), peers[1], model=models[1]))
    x, y = data(30)
    batches = [(x.to(dev), y.to(dev)), (x, y)]

    def run(i):
        opts[i].join(10)
        for _ in range(40):
            train_steps(opts[i], models[i], 1, *batches[i])
            time.sleep(0.002)
        opts[i].serve(1.0)

    run_threads([lambda i=i: run(i) for i in range(2)], 60)
    assert all(p.device == dev for p in models[0].parameters())
    for m in models:
        got = torch.cat([p.detach().cpu().reshape(-1) for p in m.parameters()])
        assert rel_distance(got.numpy(), mean.numpy()) < 1e-5
    for p in peers:
        assert p.stats()["exchanges"] > 0
        p.close(settle=False)


def test_the_quickstarts_wsd_schedule_is_rumor_peers():
    # examples/torch_quickstart.py's --lr-schedule wsd (torch) and rumor-peer's (core's
    # learning_rate; tests/core/test_optimizer.cpp checks the same numbers), so that a --mixed
    # swarm's Python and C++ peers train on one schedule.
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    import torch_quickstart as qs
    model = nn.Linear(2, 2)
    inner = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = qs.lr_scheduler(inner, "wsd", 705, 0.3)
    rates = []
    for _ in range(706):
        rates.append(inner.param_groups[0]["lr"])
        inner.step()
        sched.step()
    assert rates[0] == rates[492] == rates[493] == pytest.approx(0.1)
    assert rates[494] == pytest.approx(0.1 * 211 / 212)
    assert rates[704] == pytest.approx(0.1 / 212)
    assert rates[705] == 0.0
    assert qs.lr_scheduler(inner, "constant", 705) is None
    with pytest.raises(ValueError, match="decay fraction"):
        qs.lr_scheduler(inner, "wsd", 705, 1.5)


def test_the_cpp_torch_initialisation_starts_a_model_as_torch_does():
    # rumor-sim predicts torch peers and DDP ranks with --init torch (workload.init): each layer
    # of the C++ MLP must then start as torch's nn.Linear does, uniform in +-1/sqrt(fan-in),
    # biases too, and so give the same starting loss; He's start is another model.
    torch.manual_seed(0)
    model = mlp()
    layout = rt.ModelLayout(model)
    ref = np.zeros(layout.size, dtype=np.float32)
    layout.bind(ref)
    layout.copy_in()
    ours = _rumor.dense_init("mlp:256,128", 784, 10, 5, init="torch")
    he = _rumor.dense_init("mlp:256,128", 784, 10, 5)
    assert np.array_equal(he, _rumor.dense_init("mlp:256,128", 784, 10, 5, init="he"))
    for name, t, off, n, tr in layout.entries:
        if name.endswith("weight"):  # torch's (out, in): the bias after it has the same fan-in
            bound = 1 / math.sqrt(t.shape[1])
        a, b = ref[off:off + n], ours[off:off + n]
        assert np.abs(b).max() <= bound * (1 + 1e-6) and (n < 100 or np.abs(b).max() > 0.9 * bound), name
        assert np.count_nonzero(b) == n, name  # biases too, as torch's
        if n >= 1000:  # the weights: the same spread as torch's (uniform: std bound / sqrt(3))
            assert abs(b.std() / a.std() - 1) < 0.05, name
            assert abs(b.mean()) < 0.05 * bound, name
    x = torch.rand(512, 784)
    y = torch.randint(0, 10, (512,))
    labels = y.numpy().astype(np.int32)
    torch_loss = nn.functional.cross_entropy(model(x), y).item()
    our_loss, _ = _rumor.dense_loss_and_grad("mlp:256,128", ours, x.numpy(), labels, 10)
    he_loss, _ = _rumor.dense_loss_and_grad("mlp:256,128", he, x.numpy(), labels, 10)
    assert abs(our_loss - torch_loss) < 0.02, (our_loss, torch_loss)
    assert abs(he_loss - torch_loss) > 0.1, (he_loss, torch_loss)
    with pytest.raises(ValueError, match="expected he .* or torch"):
        _rumor.dense_init("mlp:256,128", 784, 10, 5, init="xavier")
