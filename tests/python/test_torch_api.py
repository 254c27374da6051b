"""rumor.torch shaped like torch: GossipOptimizer is a torch.optim.Optimizer (schedulers take it,
state_dict round-trips), step() without loss=, samples counted from the batch, the swarm()
context manager (join, settle, leave), ShardSampler, a schedule that travels to a joiner, and
stats() as ints."""
import io
import threading
import time

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.optim.lr_scheduler import StepLR  # noqa: E402

import rumor  # noqa: E402
import rumor.torch as rt  # noqa: E402
from conftest import rel_distance, run_threads  # noqa: E402

torch.set_num_threads(1)


def model_and_data(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 2))
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.rand(24, 1, 6, 6, generator=g)
    return m, x, (x.mean((1, 2, 3)) > 0.5).long()


def steps(opt, m, x, y, n):
    for _ in range(n):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()  # no loss=


def test_schedulers_take_the_gossip_optimizer_and_set_the_rate_it_uses():
    m, x, y = model_and_data(1)
    with rumor.Peer(seed=1, settle=0) as peer:
        inner = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        opt = rt.GossipOptimizer(inner, peer, model=m)
        assert isinstance(opt, torch.optim.Optimizer)
        assert opt.param_groups is inner.param_groups and opt.state is inner.state and opt.defaults is inner.defaults
        sched = StepLR(opt, step_size=2, gamma=0.5)  # accepted directly (a TypeError before)
        opt.join(5)
        lrs = []
        for _ in range(5):
            steps(opt, m, x, y, 1)
            sched.step()
            lrs.append(inner.param_groups[0]["lr"])
        assert lrs == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.025])
        # The scheduled rate is the one used: at lr 0 the parameters stop moving (momentum too:
        # SGD scales the whole update by lr).
        for g in opt.param_groups:
            g["lr"] = 0.0
        before = [p.detach().clone() for p in m.parameters()]
        steps(opt, m, x, y, 2)
        assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_state_dict_round_trips_through_torch_save():
    m, x, y = model_and_data(2)
    with rumor.Peer(seed=2, settle=0) as peer:
        opt = rt.GossipOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), peer, model=m)
        opt.join(5)
        steps(opt, m, x, y, 3)
        buf = io.BytesIO()
        torch.save(opt.state_dict(), buf)
        saved = opt.state_dict()
    m2, _, _ = model_and_data(3)
    with rumor.Peer(seed=3, settle=0) as peer2:
        opt2 = rt.GossipOptimizer(torch.optim.Adam(m2.parameters(), lr=0.5), peer2, model=m2)
        buf.seek(0)
        opt2.load_state_dict(torch.load(buf))
        assert opt2.param_groups[0]["lr"] == 0.01  # the saved hyperparameters
        loaded = opt2.state_dict()
        assert loaded["param_groups"] == saved["param_groups"]
        for k, st in saved["state"].items():
            for key, v in st.items():
                assert torch.equal(loaded["state"][k][key], v), key
        # The wrapper still shows the wrapped optimizer's (new) objects, and trains with them.
        assert opt2.state is opt2.optimizer.state and len(opt2.state) == len(list(m2.parameters()))
        opt2.join(5)
        steps(opt2, m2, x, y, 1)
        assert int(opt2.state[next(m2.parameters())]["step"]) == 4


def test_samples_are_counted_from_the_training_batches_and_stats_are_ints():
    m, x, y = model_and_data(4)
    with rumor.Peer(seed=4, settle=0) as peer:
        opt = rt.GossipOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), peer, model=m)
        opt.join(5)
        steps(opt, m, x, y, 2)  # 24 samples each
        with torch.no_grad():
            m(x)  # an evaluation: not counted
        opt.zero_grad()
        for half in (x[:10], x[10:15]):  # gradient accumulation: two forwards, one step
            nn.functional.cross_entropy(m(half), y[:len(half)]).backward()
        opt.step()
        steps(opt, m, x, y, 0)
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step(samples=7)  # an explicit count wins
        s = peer.stats()
        assert s["steps"] == 4 and s["samples"] == 24 + 24 + 15 + 7
        assert all(type(v) is int for k, v in s.items() if k != "wait_s"), s
        assert isinstance(s["wait_s"], float)


def test_the_swarm_context_manager_joins_settles_and_leaves(capfd):
    models = [model_and_data(5)[0] for _ in range(2)]
    _, x, y = model_and_data(5)
    ctx = [rt.swarm(models[0], torch.optim.SGD(models[0].parameters(), lr=0.05), seed=5, min_peers=2)]
    ctx.append(rt.swarm(models[1], torch.optim.SGD(models[1].parameters(), lr=0.05), join=[ctx[0].peer.address],
                        seed=6, min_peers=2))

    def run(i):
        with ctx[i] as opt:  # joins
            assert isinstance(opt, rt.GossipOptimizer) and not opt.peer.closed
            steps(opt, models[i], x + 0.05 * i, y, 40)  # different data: the models drift apart
        return opt

    for opt in run_threads([lambda: run(0), lambda: run(1)], 60):
        assert opt.peer.closed
    err = capfd.readouterr().err
    assert err.count("training ended: settling with the swarm before leaving") == 2
    assert err.count("in the swarm (shard 1/1, listening on 127.0.0.1:") == 2
    flat = [torch.cat([p.detach().reshape(-1) for p in mm.parameters()]).numpy() for mm in models]
    assert rel_distance(flat[0], flat[1]) < 1e-3  # settling ended them on one model


def test_an_exception_in_the_block_leaves_without_settling(capfd):
    m, x, y = model_and_data(6)
    with pytest.raises(KeyboardInterrupt):
        with rt.swarm(m, torch.optim.SGD(m.parameters(), lr=0.1), seed=7) as opt:
            steps(opt, m, x, y, 2)
            raise KeyboardInterrupt
    assert opt.peer.closed
    assert "settling" not in capfd.readouterr().err


def test_shard_sampler_gives_each_peer_its_disjoint_shard(monkeypatch):
    data = list(range(103))
    monkeypatch.setenv("RUMOR_SHARD", "2/4")
    s = rt.ShardSampler(data, seed=3)
    assert (s.k, s.n) == (2, 4)
    shards = [set(rt.ShardSampler(data, shard=(k, 4), seed=3)) for k in (1, 2, 3, 4)]
    assert set(s) == shards[1]
    assert sum(len(x) for x in shards) == 103 and set().union(*shards) == set(data)
    assert all(25 <= len(x) <= 26 for x in shards)
    s = rt.ShardSampler(data, seed=3)
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) and first != second  # reshuffled at every pass
    s.set_epoch(0)  # as DistributedSampler.set_epoch: pass 0's order
    assert list(s) == first and list(s) == first
    loader = torch.utils.data.DataLoader(torch.arange(103), batch_size=10, sampler=s)
    assert sorted(torch.cat(list(loader)).tolist()) == sorted(shards[1])
    monkeypatch.setenv("RUMOR_SHARD", "5/4")
    with pytest.raises(ValueError):
        rt.ShardSampler(data)


def test_a_joiner_continues_the_swarms_schedule():
    m, x, y = model_and_data(8)
    src = rumor.Peer(seed=8)
    opt = rt.GossipOptimizer(torch.optim.Adadelta(m.parameters(), lr=1.0), src, model=m, share_state_every=0.01)
    sched = opt.add_scheduler(StepLR(opt, step_size=1, gamma=0.7))
    opt.join(5)
    for _ in range(3):  # three "epochs"
        steps(opt, m, x, y, 2)
        sched.step()
    opt.publish_state()
    m2, _, _ = model_and_data(9)
    joiner = rt.GossipOptimizer(torch.optim.Adadelta(m2.parameters(), lr=1.0), rumor.Peer(join=[src.address], seed=9),
                                model=m2)

    def serve():
        src.serve(3.0)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    step = joiner.join(20)
    t.join(10)
    sched2 = joiner.add_scheduler(StepLR(joiner, step_size=1, gamma=0.7))
    try:
        assert step == 6 and joiner.optimizer_state_from == "swarm"
        assert sched2.last_epoch == sched.last_epoch == 3
        assert joiner.param_groups[0]["lr"] == pytest.approx(0.7 ** 3)
        sched2.step()
        assert joiner.param_groups[0]["lr"] == pytest.approx(0.7 ** 4)  # and goes on from there
        p, q = next(m.parameters()), next(m2.parameters())
        assert torch.allclose(opt.state[p]["square_avg"], joiner.state[q]["square_avg"])
    finally:
        joiner.close(settle=False)
        src.close(settle=False)


def test_the_optimizer_steps_at_the_rate_times_the_peers_still_training():
    """GossipOptimizer multiplies the groups' rate by peer.lr_scale() for the step and leaves the
    groups' own rate (what schedulers set) as it was: alone after its neighbour left, a plain
    SGD step moves the parameters by lr/2 x the gradient."""
    ma, x, y = model_and_data(3)
    mb = model_and_data(3)[0]
    a = rumor.Peer(seed=21, settle=0, min_peers=2)
    oa = rt.GossipOptimizer(torch.optim.SGD(ma.parameters(), lr=0.1), a, model=ma)
    b = rumor.Peer(seed=22, settle=0, min_peers=2, join=[a.address])
    ob = rt.GossipOptimizer(torch.optim.SGD(mb.parameters(), lr=0.1), b, model=mb)
    run_threads([lambda: (oa.join(10), steps(oa, ma, x, y, 5)), lambda: (ob.join(10), steps(ob, mb, x, y, 5))], 60)
    ob.close(settle=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and a.stats()["trainers"] > 1:
        time.sleep(0.05)
    assert a.stats()["trainers"] == 1
    time.sleep(0.3)  # b's close() returned once its hand-over was sent: let a's responder take it in
    oa.zero_grad()
    oa.step()  # no gradients: takes in what the swarm mixed into a meanwhile (b's leave hands its model over)
    oa.zero_grad()
    nn.functional.cross_entropy(ma(x), y).backward()
    before = [p.detach().clone() for p in ma.parameters()]
    grads = [p.grad.detach().clone() for p in ma.parameters()]
    oa.step()
    for p0, g, p1 in zip(before, grads, ma.parameters()):
        assert torch.allclose(p1.detach(), p0 - 0.05 * g, atol=1e-6)
    assert oa.param_groups[0]["lr"] == 0.1
    oa.close(settle=False)


def test_a_swarm_budget_ends_the_loop_and_a_schedule_can_follow_it():
    """GossipOptimizer(swarm_samples=...): `while not opt.done` ends once the swarm (here one
    peer, 24 samples a step) has processed the budget, and a LambdaLR on opt.swarm_progress (the
    docs' wsd recipe) decays the rate with it."""
    m, x, y = model_and_data(4)
    with rumor.Peer(seed=31, settle=0) as peer:
        opt = rt.GossipOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), peer, model=m, swarm_epochs=2,
                                 train_set_size=240)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: min(1.0, (1 - opt.swarm_progress) / 0.3))
        opt.join(5)
        rates, n = [], 0
        while not opt.done and n < 100:
            steps(opt, m, x, y, 1)
            sched.step()
            rates.append(opt.param_groups[0]["lr"])
            n += 1
        assert n == 20  # 480 samples at 24 a step
        assert opt.swarm_progress == 1.0 and peer.stats()["swarm_samples"] == 480
        assert rates[:13] == pytest.approx([0.1] * 13)  # held for 70% of the budget
        assert rates[15] == pytest.approx(0.1 * (1 - 16 / 20) / 0.3) and rates[-1] == 0.0


def test_outer_momentum_trains_two_peers_that_agree_once_settled():
    """outer_lr / outer_momentum (gossip-DiLoCo, core/outer.hpp) are settings like local_steps:
    two peers train with them, stay finite, and settling (plain averaging) brings them together;
    a momentum of 1 is refused with the setting's name and range."""
    ma, x, y = model_and_data(5)
    mb = model_and_data(6)[0]
    kw = dict(settle=2, min_peers=2, local_steps=2, outer_lr=0.7, outer_momentum=0.9)
    a = rumor.Peer(seed=31, **kw)
    oa = rt.GossipOptimizer(torch.optim.SGD(ma.parameters(), lr=0.05), a, model=ma)
    b = rumor.Peer(seed=32, join=[a.address], **kw)
    ob = rt.GossipOptimizer(torch.optim.SGD(mb.parameters(), lr=0.05), b, model=mb)
    exchanges = {}

    def train(name, peer, opt, m):
        opt.join(10)
        steps(opt, m, x, y, 40)
        exchanges[name] = peer.stats()["exchanges"]
        opt.close()

    run_threads([lambda: train("a", a, oa, ma), lambda: train("b", b, ob, mb)], 90)
    assert exchanges["a"] + exchanges["b"] > 0
    va = torch.cat([p.detach().flatten() for p in ma.parameters()])
    vb = torch.cat([p.detach().flatten() for p in mb.parameters()])
    assert torch.isfinite(va).all() and torch.isfinite(vb).all()
    assert rel_distance(va, vb) < 1e-3
    with pytest.raises(ValueError, match="outer_momentum"):
        rumor.Peer(outer_momentum=1)
