// The simulator's driver of each peer's PeerLoop (core/peer_loop.hpp has the contract):
// start, steps (the compute model draws their length), evaluations, waits, exit; and the CPU
// share a peer takes.
#include "sim/simulation_impl.hpp"

#include <algorithm>
#include <cmath>

#include "core/model.hpp"

namespace rumor::sim {

// ---------------------------------------------------------------- life cycle

std::vector<PeerId> Simulation::Impl::seeds_for(const Peer& p) {
  std::vector<PeerId> out;
  const bool founder_start = p.index < s.founders && p.life == 0;
  const auto add = [&](std::uint32_t j) {
    if (j != p.index) out.push_back(peers[j].id);
  };
  if (founder_start) {
    switch (s.bootstrap) {
      case Bootstrap::Seed: add(0); break;
      case Bootstrap::All:
        for (std::uint32_t j = 0; j < s.founders; ++j) add(j);
        break;
      case Bootstrap::Neighbours: {
        const auto nb = topology_neighbours(s.topology, p.index, s.total_ids);
        for (auto j : nb)
          if (j < s.founders) add(j);
        if (nb.empty()) add(0);
        break;
      }
    }
    return out;
  }
  // A later join: through live members only (a user gives --join addresses that answer).
  std::vector<std::uint32_t> live;
  for (const Peer& q2 : peers)
    if (q2.running() && q2.index != p.index) live.push_back(q2.index);
  if (live.empty()) return out;
  if (s.bootstrap == Bootstrap::All) {
    for (auto j : live) add(j);
    return out;
  }
  if (s.bootstrap == Bootstrap::Neighbours) {
    for (auto j : topology_neighbours(s.topology, p.index, s.total_ids))
      if (peers[j].running()) add(j);
    if (!out.empty()) return out;
  }
  if (s.bootstrap == Bootstrap::Seed && peers[0].running() && p.index != 0) {
    add(0);
    return out;
  }
  for (int k = 0; k < 3 && !live.empty(); ++k) {
    const std::size_t pick = churn_rng.below(live.size());
    add(live[pick]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return out;
}

// The process is up: model, Env and protocol exist and connections are accepted (inputs wait
// until begin_peer, as they wait in the daemon's inbox before its loop runs).
void Simulation::Impl::open_peer(Peer& p) {
  RUMOR_CHECK(p.state == PeerState::Pending && p.exists);
  p.state = PeerState::Training;
  p.started_at = now;
  p.busy = true;
  p.begun = false;
  p.waiting = false;
  p.stepping = false;
  p.skip_drain = false;
  p.served = false;
  p.wait_until = -1;
  p.pending_cpu = 0;
  p.cpu_total = p.cpu_protocol = 0;
  const Rng root(s.seed);
  p.compute_rng = root.fork(streams::kComputeBase + p.index).fork(p.life);
  if (s.time_slice > 0 || s.classes[p.cls].capped_in_windows()) {
    Rng slices = root.fork(streams::kSliceBase + p.index).fork(p.life);
    p.turn_rng = slices.fork(1);
    p.slice_phase = slices.uniform(0, 1);
  }
  p.turns.clear();
  p.turn_head = 0;
  p.model = work->make_peer(p.index, p.life);
  p.side = std::make_unique<SimLoopModel>(*p.model, s.training);
  // A restart after a fault crash resumes from the model and step it had (a checkpoint).
  const bool resumed = p.has_checkpoint;
  p.resumed = resumed;
  if (resumed) {
    p.has_checkpoint = false;
    std::copy(p.checkpoint.begin(), p.checkpoint.end(), p.model->params().begin());
    if (s.training) p.model->adopt_step(p.checkpoint_step); else p.side->ticks = p.checkpoint_step;
    p.checkpoint.clear();
    p.checkpoint.shrink_to_fit();
  }
  p.slow = fire(FaultPoint::Slow) ? s.faults.slow_factor : 1.0;
  p.rate = fire(FaultPoint::ClockSkew) ? fault_rng.uniform(1 - s.faults.skew, 1 + s.faults.skew) : 1.0;
  p.stalled = false;
  p.env = std::make_unique<SimEnv>(*this, p.index, p.life, p.life == 0 ? root.fork(p.index) : root.fork(p.index).fork(p.life));
  p.env->set_rate(p.rate);
  LoopSettings ls = loop_settings(s);
  ls.train_set_rows = work->train_set_rows();
  if (s.train_evals) ls.evaluate_in_training = std::binary_search(s.train_evals->begin(), s.train_evals->end(), p.index);
  // A Python script settles in its serve() pause (act), then evaluates and leaves.
  if (s.classes[p.cls].driver == PeerClass::Driver::Python) ls.settle_s = 0;
  // Founders started together through `all` or `neighbours` are one swarm from the start: none
  // has a model the others lack, so none fetches one (with `seed` they join p0 as rumor-peer
  // --join does, and learn from it that there is nothing to fetch yet). Nor do founders that
  // wait for run.min_peers > 1, whatever the bootstrap: rumor-peer --min-peers N > 1 does not
  // fetch (peer/daemon.cpp). Before 2026-12-07 the testbed's S4 had its peer on 10 Mbit fetch
  // p0's step-0 model here, 0.94 MB over its link: it started 0.9 s after the others, and
  // every prediction of S4 was 40-50% late (docs/testbed.md).
  const bool founder = p.index < s.founders && p.life == 0;
  ls.gossip.fetch_state = s.fetch_state && !(founder && (s.bootstrap != Bootstrap::Seed || ls.min_peers > 1));
  if (resumed) ls.gossip.fetch_state = false;  // rumor-peer --resume continues from its own model
  // Test-only mutations (faults.mutation): the checker still holds the peers to the scenario.
  if (s.faults.mutation == Mutation::SkipOverlap) ls.gossip.staleness = INFINITY;
  if (s.faults.mutation == Mutation::KeepDead) ls.gossip.test_keep_dead = true;
  ls.gossip.pool_snapshots = false;  // memory: thousands of peers, one process
  for (auto j : topology_neighbours(s.topology, p.index, s.total_ids)) ls.gossip.neighbours.push_back(peers[j].id);
  // The incarnation is the life: a restarted peer outranks its tombstone in every view (the
  // daemon uses wall-clock milliseconds for the same effect).
  p.loop = std::make_unique<PeerLoop>(*p.env, ls, MemberDigest{p.id, p.life, MemberState::Alive, 0},
                                      work->fingerprint(), *p.side);
}

// PeerLoop::start(seeds), then whatever the loop says.
void Simulation::Impl::begin_peer(Peer& p) {
  p.begun = true;
  const auto seeds = seeds_for(p);
  std::string seed_list;
  for (const auto& x : seeds) seed_list += (seed_list.empty() ? "" : " ") + x;
  if (seeds.size() > 4) seed_list = std::to_string(seeds.size()) + " seeds";
  log(p, "start", "", p.life, 0, seed_list);
  p.loop->start(seeds);
  act(p);
}

// The simulator's driver of core's PeerLoop: carries out what it says next. Inputs that
// arrived during a step or an evaluation are handed over first (the daemon's drain at the
// top of its loop); an idle peer handles its inputs as they come (offer).
void Simulation::Impl::act(Peer& p) {
  if (!p.skip_drain) drain(p);
  p.skip_drain = false;
  if (s.classes[p.cls].driver == PeerClass::Driver::Python && !p.served && s.loop.settle_s > 0 &&
      p.loop->phase() == LoopPhase::Training && p.loop->stop_rule()) {
    // The script's last step is done: it serves (pauses) for run.settle, up to run.settle_max
    // while a member is behind (examples/torch_quickstart.py: opt.serve(settle, settle_max));
    // then the loop ends training without settling again (settle_s = 0 in its settings), and
    // the final evaluation and the leave follow as a daemon's.
    p.served = true;
    p.loop->pause(s.loop.settle_s, s.loop.settle_max_s);
  }
  const LoopAction a = p.loop->next();
  p.waiting = false;
  if (p.loop->phase() == LoopPhase::Settling && p.state == PeerState::Training) {
    p.state = PeerState::Settling;
    log(p, "settle", "", peer_steps(p), 0, fmt::format("bytes_sent={}", p.bytes_sent));
  }
  switch (a.kind) {
    case LoopAction::Kind::Step:
      return begin_step(p);
    case LoopAction::Kind::Evaluate:
      peer_eval(p);
      p.skip_drain = a.final;  // the daemon leaves right after its final evaluation
      return pause(p);
    case LoopAction::Kind::Wait: {
      // Woken by an input (offer) or at `until`: one event there, unless one is already set.
      p.busy = false;
      if (s.faults.mutation == Mutation::EndlessWait && p.loop->phase() == LoopPhase::Training) return;  // never woken
      p.waiting = true;
      const double t = std::max(a.until / p.rate, now);  // `until` is on the peer's own clock
      if (t != p.wait_until) {
        p.wait_until = t;
        schedule(t, EventKind::WaitTick, p.index, p.life, ++p.wait_iter);
      }
      return;
    }
    case LoopAction::Kind::Exit:
      return exit_peer(p);
  }
}

double Simulation::Impl::draw_step(Peer& p) {
  const PeerClass& c = s.classes[p.cls];
  double m = c.step_time * p.slow;
  for (auto k : p.stragglers) {
    const StragglerSpec& st = s.stragglers[k];
    if (now >= st.at && (st.until < 0 || now < st.until)) m *= st.factor;
  }
  switch (c.dist) {
    case StepDist::Constant: return m;
    case StepDist::Normal: return m * std::max(0.05, 1.0 + c.sd * p.compute_rng.normal());
    case StepDist::Lognormal: return m * std::exp(c.sd * p.compute_rng.normal() - 0.5 * c.sd * c.sd);
    case StepDist::Exponential: return m * p.compute_rng.exponential(1.0);
  }
  return m;
}

// A step: its math at the mid-step boundary, inputs held until its end. With training off
// (averaging studies) a "step" is an idle tick of the same length, inputs handled as they come.
void Simulation::Impl::begin_step(Peer& p) {
  p.stepping = true;
  // faults.stall: paused (SIGSTOP, a long GC) before the step: inputs queue, nothing runs.
  if (!p.stalled && fire(FaultPoint::Stall)) {
    p.stalled = true;
    p.busy = true;
    const double d = fault_rng.uniform(0, s.faults.stall_max);
    log(p, "stall", "", peer_steps(p), d, "fault stall");
    schedule(now + d, EventKind::Fault, p.index, p.life, kStallEnd);
    return;
  }
  p.stalled = false;
  if (!s.training) {
    p.busy = false;
    p.step_seconds = draw_step(p);
    schedule(now + p.step_seconds, EventKind::Tick, p.index, p.life, ++p.step_iter);
    return;
  }
  p.busy = true;
  const double work = draw_step(p) + p.pending_cpu;
  p.pending_cpu = 0;
  p.cpu_total += work;
  p.step_end_at = cpu_end(p, now, work);
  p.step_seconds = p.step_end_at - now;
  schedule(cpu_end(p, now, s.mid_fraction * work), EventKind::StepMid, p.index, p.life);
}

// The end of `work` seconds of computing that advances only in windows of `on` seconds every
// `period`, the first at `phase`. Each window passed consumes `on` > 0 of it, so this ends.
static double in_windows(double start, double work, double on, double period, double phase) {
  double k = std::floor((start - phase) / period);
  double t = start, left = work;
  for (;;) {
    const double from = std::max(t, phase + k * period), to = phase + k * period + on;
    if (from < to) {
      if (left <= to - from) return from + left;
      left -= to - from;
    }
    k += 1;
    t = phase + k * period;
  }
}

// Random turns: a wait for a core of (f - 1) x time_slice x e, then a turn of time_slice x e, e
// drawn Exp(1) for each pair, f the sharing factor when it is drawn. Every wait and turn
// together give the peer exactly its share 1 / f (the scheduler is fair: a thread that waited
// long runs long, as CFS lets one that fell behind catch up), but the waits vary as a real
// scheduler's do: a message that lands while its peer waits is handled (f - 1) x time_slice
// later on average (long waits are likelier to be landed in), against half that when the turns
// come like clockwork. (In a real quickstart the compute threads' waits for a core, weighted by
// their length, averaged 4.5 ms; time_slice 4 ms and f 2 give 4 ms random, 2 ms periodic.)
double Simulation::Impl::end_in_turns(Peer& p, double start, double work, double f) {
  auto& w = p.turns;
  // A wait from `t` (none if `wait` is false), then the turn after it, both scaled by `e`.
  const auto push = [&](double t, double e, bool wait) {
    const double from = wait ? t + (f - 1) * s.time_slice * e : t;
    w.emplace_back(from, from + s.time_slice * e);
  };
  while (p.turn_head < w.size() && w[p.turn_head].second <= start) ++p.turn_head;
  if (p.turn_head == w.size()) {
    // None drawn reaches `start` (the peer was idle, or this is its first work): where it
    // stands now, from the stationary odds of being on, 1 / f.
    w.clear();
    p.turn_head = 0;
    const double e = p.turn_rng.exponential(1.0);
    push(start, e, p.turn_rng.uniform() * f >= 1.0);
  } else if (p.turn_head > 32) {
    w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(p.turn_head));
    p.turn_head = 0;
  }
  double t = start, left = work;
  for (std::size_t i = p.turn_head;; ++i) {
    if (i == w.size()) push(w.back().second, p.turn_rng.exponential(1.0), true);
    const double from = std::max(t, w[i].first), to = w[i].second;
    if (from < to) {
      if (left <= to - from) return from + left;
      left -= to - from;
    }
    t = std::max(t, to);
  }
}

double Simulation::Impl::cpu_end(Peer& p, double start, double work) {
  const double f = cpu_factor();
  const PeerClass& c = s.classes[p.cls];
  // A CFS quota (class cpu_period): `work` is the machine's average time (a whole core's over
  // cpu); a whole core's worth of it runs in windows of cpu x cpu_period every cpu_period.
  if (c.capped_in_windows())
    return in_windows(start, work * f * c.cpu, c.cpu * c.cpu_period, c.cpu_period, p.slice_phase * c.cpu_period);
  if (s.time_slice <= 0 || f <= 1.0) return start + work * f;
  if (s.turns == Turns::Random) return end_in_turns(p, start, work, f);
  const double period = s.time_slice * f;
  return in_windows(start, work, s.time_slice, period, p.slice_phase * period);
}

void Simulation::Impl::step_mid(Peer& p) {
  p.last_loss = p.model->compute_gradient();
  drain(p);  // the daemon answers exchanges between forward/backward and the optimizer step
  schedule(std::max(p.step_end_at, now), EventKind::StepEnd, p.index, p.life);
}

void Simulation::Impl::step_end(Peer& p) {
  // A swarm-wide budget: a decaying schedule anneals with the swarm's progress (as rumor-peer's).
  if (work->follows_swarm()) p.model->follow_progress(p.loop->swarm_progress());
  // Fewer peers training than this one has seen: a smaller step (LoopSettings::lr_follows_peers).
  p.model->scale_lr(p.loop->lr_scale());
  p.model->apply_gradient();
  ++totals.steps;
  p.stepping = false;
  p.loop->step_done(p.last_loss, p.step_seconds, 0);
  act(p);
}

void Simulation::Impl::tick(Peer& p) {
  ++p.side->ticks;
  p.stepping = false;
  p.loop->step_done(0, 0, 0);  // ticks are not training: settling keeps its 2 ms pace
  act(p);
}

void Simulation::Impl::peer_eval(Peer& p) {
  const EvalResult r = work->evaluate(p.model->params());
  p.final_acc = r.accuracy;
  p.final_loss = r.loss;
  p.eval_pending = true;  // logged when the pause ends (log_eval)
  p.eval_steps = peer_steps(p);
  p.eval_detail = fmt::format("loss={:.6f} epoch={:.4f}", r.loss, s.training ? p.model->epochs_done() : 0.0);
}

void Simulation::Impl::log_eval(Peer& p) {
  if (!p.eval_pending) return;
  p.eval_pending = false;
  log(p, "eval", "", p.eval_steps, p.final_acc, p.eval_detail);
}

// An evaluation holds the peer (inputs wait) for the class's eval_time; with
// compute.driver = python, only for its first 20 ms (the Python module's responder then answers:
// Respond). Not the final one, after which the peer leaves as the daemon does.
void Simulation::Impl::pause(Peer& p) {
  constexpr double kRespondAfter = 0.02;  // python/python_peer.hpp
  p.busy = true;
  update_cpu(p);
  const double end = cpu_end(p, now, s.classes[p.cls].eval_time);
  // Only before the pause's end: Respond then always comes within its pause (a crash voids it
  // by the life), so it needs no mark of which pause it belongs to.
  if (s.classes[p.cls].driver == PeerClass::Driver::Python && !p.skip_drain && now + kRespondAfter < end)
    schedule(now + kRespondAfter, EventKind::Respond, p.index, p.life);
  schedule(end, EventKind::Resume, p.index, p.life);
}

void Simulation::Impl::exit_peer(Peer& p) {
  const bool left = p.loop->stop_requested();
  const std::uint64_t st = peer_steps(p);
  const double began = p.loop->stats().training_started;
  p.state = left ? PeerState::Left : PeerState::Done;
  if (left) ++totals.leaves;
  log(p, left ? "left" : "done", "", st, now - (began >= 0 ? began : p.started_at),
      (s.peer_evals ? fmt::format("test_acc={:.6f} loss={:.6f} ", p.final_acc, p.final_loss) : std::string()) +
          fmt::format("bytes_sent={}", p.bytes_sent));
  drop_process(p);
  if (left) {  // a peer that left takes its model with it
    p.side.reset();
    p.model.reset();
  }
}

// The process is gone: its inputs, loop, protocol and Env go with it (the model, and what the
// loop saw of it, stay for Done).
void Simulation::Impl::drop_process(Peer& p) {
  release_inbox(p);
  p.busy = false;
  p.eval_pending = false;  // killed mid-evaluation: the line is never written
  p.waiting = false;
  p.stepping = false;
  p.loop.reset();
  p.env.reset();
}

// Whether the peer uses a core now, and at which weight: loading its data (nice 0); training or
// evaluating (its compute thread, nice 5). Waiting peers sleep, settling ones included: between
// its exchanges a settling rumor-peer's compute thread sleeps in its inbox (perf sched of a real
// quickstart: its compute threads went to sleep 40-95 times per 100 ms once they settled). The
// CPU of a settling peer's exchanges delays their messages (Network's path) but takes no share
// of the cores from the others. Looked at after every event that may have changed it.
void Simulation::Impl::update_cpu(Peer& p) {
  std::uint32_t w = 0;
  if (s.training && p.exists) {
    if (p.state == PeerState::Pending) w = kLoadWeight;
    else if (p.running() && !p.waiting) w = kTrainWeight;
  }
  cpu_weight = cpu_weight + w - p.cpu;
  p.cpu = w;
  const bool a = p.exists && (p.state == PeerState::Pending || p.running());
  if (a != p.active) {
    p.active = a;
    if (a) ++active; else --active;
  }
}

}  // namespace rumor::sim
