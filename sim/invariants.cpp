// The invariant checker (invariants.hpp has the list; docs/testing.md the bounds).
#include "sim/invariants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/protocol_messages.hpp"
#include "sim/simulator.hpp"

namespace rumor::sim {

namespace {
PeerId pid(std::uint32_t i) { return "p" + std::to_string(i); }
bool is_exchange(MsgType t) {
  return t == MsgType::ExchangeRequest || t == MsgType::ExchangeReply || t == MsgType::ExchangePayload ||
         t == MsgType::ExchangeAccept;
}
}  // namespace

std::string Violation::line() const {
  return fmt::format("{} at {:.6f} s{}: {}", name, time, peer.empty() ? "" : ", " + peer, detail);
}

InvariantChecker::InvariantChecker(const Scenario& s) : s_(s) {
  const LoopSettings ls = s.loop.resolved();
  const GossipConfig& g = ls.gossip;
  tau_ = g.staleness;
  const FaultSettings& f = s.faults;
  const double n = s.total_ids;
  // Clock skew: a peer's timers may run slower by up to 1 / (1 - skew).
  const double slowdown = f[FaultPoint::ClockSkew] > 0 ? 1.0 / (1.0 - f.skew) : 1.0;
  const double stall = f[FaultPoint::Stall] > 0 ? f.stall_max : 0.0;
  // SWIM (core/gossip.hpp, GossipConfig::probe_interval_s): a crashed peer is probed within
  // probe_interval per member probed before it, suspected a probe interval later, declared dead
  // suspect_timeout later; news of it spreads with the next messages. Twice that, for slack.
  detection_bound_ =
      2 * slowdown * (g.probe_interval_s * (n + 2) + g.probe_timeout_s + g.suspect_timeout_s + g.exchange_timeout_s) + stall + 1;
  // After a heal, each side pings the members it holds dead, one per probe interval.
  heal_bound_ = detection_bound_ + 2 * slowdown * g.probe_interval_s * (n + 2);
  double max_step = 0, max_start = 0;
  for (const auto& c : s.classes) {
    max_step = std::max(max_step, c.step_time * (c.dist == StepDist::Constant ? 1.0 : 5.0) + c.eval_time + c.exchange_cpu);
    max_start = std::max(max_start, c.start);
  }
  for (const auto& st : s.stragglers) max_step *= std::max(1.0, st.factor);
  if (f[FaultPoint::Slow] > 0) max_step *= f.slow_factor;
  const double waits = std::max({ls.settle_max_s, ls.settle_s, ls.min_peers > 1 ? ls.min_peers_timeout_s : 0.0,
                                 std::isfinite(g.join_timeout_s) ? g.join_timeout_s : 0.0});
  liveness_bound_ = detection_bound_ + stall + (f[FaultPoint::Partition] > 0 ? f.partition_max : 0) +
                    (f[FaultPoint::Restart] > 0 ? 1.5 * f.restart_after : 0) + max_start + 2 * g.exchange_timeout_s +
                    g.state_timeout_s * g.state_attempts + 3 * g.leave_timeout_s + ls.leave_wait_s + waits +
                    ls.state_wait_s + 20 * max_step * static_cast<double>((g.local_steps ? g.local_steps : GossipConfig::kAutoMaxLocalSteps) + 1) * (tau_ < 1 ? 2 : 1);
  // The whole run: every peer's stop rule at its slowest pace, plus the churn, plus slack.
  double last_churn = 0;
  for (const auto& a : s.churn) last_churn = std::max(last_churn, a.at);
  const double steps = ls.steps ? static_cast<double>(ls.steps) : 1000.0;
  run_bound_ = s.duration > 0 ? s.duration + 1
                              : last_churn + liveness_bound_ * 4 + steps * max_step * (1 + stall) + ls.duration_s;
  conservation_ = !s.training && s.churn.empty() && s.loss == 0 && s.partitions.empty() && !f.changes_sum() &&
                  g.mix_weight == MixWeight::Uniform && g.codec == PayloadCodec::None &&
                  (s.bootstrap != Bootstrap::Seed || !s.fetch_state);
}

void InvariantChecker::fail(const std::string& name, double t, const std::string& peer, const std::string& detail) {
  ++violations_;
  if (!first_) first_ = Violation{name, t, peer, detail};
}

// The sums over the coordinates dims_ of the models of peers that have one (running or done)
// plus what initiators still owe: for an exchange whose responder mixed (streamed: its accept
// is in flight or received; one-shot: it replied), b/(a+b) (y_s - x_s), y_s from the held reply
// or the one in flight. One pass over the peers and the messages in flight for every dimension.
std::vector<double> InvariantChecker::conserved_sums(const Simulation& sim, bool count_owed) {
  std::vector<double> sum(dims_.size(), 0.0);
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (sim.state(i) != PeerState::Crashed && sim.state(i) != PeerState::Left && !sim.params(i).empty()) {
      const auto x = sim.params(i);
      for (std::size_t k = 0; k < dims_.size(); ++k) sum[k] += x[dims_[k]];
    }
  // Only exchanges open at some initiator matter: most events have none in the way.
  bool any_open = false;
  for (std::uint32_t i = 0; i < sim.ids() && !any_open; ++i)
    if (const Gossip* g = sim.gossip(i)) any_open = g->exchanges_in_flight() > 0;
  if (!any_open) return sum;
  using Key = std::tuple<PeerId, PeerId, std::uint64_t>;
  std::map<Key, bool> accepts;
  std::map<Key, std::vector<std::pair<const Message*, ExchangeMsg>>> replies;
  sim.for_each_message_in_flight([&](const PeerId& from, const PeerId& to, const Message& m) {
    if (m.type != MsgType::ExchangeAccept && m.type != MsgType::ExchangeReply) return;
    try {
      const ExchangeMsg h = decode_exchange(m);
      if (m.type == MsgType::ExchangeAccept) accepts[{from, to, h.exchange_id}] = true;
      else replies[{from, to, h.exchange_id}].push_back({&m, h});
    } catch (const std::exception&) {
    }
  });
  for (std::uint32_t i = 0; i < sim.ids(); ++i) {
    const Gossip* g = sim.gossip(i);
    if (!g || g->exchanges_in_flight() == 0) continue;
    const PeerId me = pid(i);
    for (const auto& o : g->open_exchanges()) {
      const Key key{o.peer, me, o.id};
      std::vector<std::pair<const Message*, ExchangeMsg>> reply;
      for (const Message* m : o.reply) {
        try {
          reply.push_back({m, decode_exchange(*m)});
        } catch (const std::exception&) {
        }
      }
      if (const auto it = replies.find(key); it != replies.end()) reply.insert(reply.end(), it->second.begin(), it->second.end());
      const bool mixed = o.streamed ? (o.accepted || accepts.count(key)) : !reply.empty();
      if (!mixed) continue;  // the responder has not mixed (yet)
      if (count_owed) ++counts_.half_applied;
      for (std::size_t k = 0; k < dims_.size(); ++k) {
        // Fragments: the exchange owes only on its range; offsets count from its start.
        if (dims_[k] < o.lo || dims_[k] - o.lo >= o.snapshot.size()) continue;
        const std::size_t c = dims_[k] - o.lo;
        const Message* holder = nullptr;
        const ExchangeMsg* hh = nullptr;
        for (const auto& [m, h] : reply)
          if (c >= h.offset && c < h.offset + h.floats_here()) {
            holder = m;
            hh = &h;
          }
        if (!holder) {
          fail("conservation", sim.now(), me, fmt::format("exchange {} with {} accepted but its reply is nowhere", o.id, o.peer));
          break;
        }
        const auto ys = as_floats(*holder->payload);
        if (c - hh->offset >= ys.size()) continue;  // a cut reply (faults.truncate): refused when it lands
        sum[k] += hh->weight / (o.weight + hh->weight) * (static_cast<double>(ys[c - hh->offset]) - o.snapshot[c]);
      }
    }
  }
  return sum;
}

void InvariantChecker::on_send(const Simulation& sim, std::uint32_t from, std::uint32_t to, const Message& m) {
  if (!is_exchange(m.type) || m.type == MsgType::ExchangeAccept || m.type == MsgType::ExchangePayload) return;
  ExchangeMsg h;
  try {
    h = decode_exchange(m);
  } catch (const std::exception&) {
    return;
  }
  if (h.offset != 0) return;  // a later chunk: the first one carried the clock
  if (m.type == MsgType::ExchangeRequest) {
    request_clock_[{from, to, h.exchange_id}] = h.clock;
    if (request_clock_.size() > 100000) request_clock_.erase(request_clock_.begin());
    return;
  }
  // A reply: the two snapshots that both sides mix.
  const auto it = request_clock_.find({to, from, h.exchange_id});
  if (it == request_clock_.end()) return;  // a reply to a request this checker never saw
  ++counts_.tau_mix;
  const std::uint64_t a = it->second, b = h.clock;
  const double gap = a > b ? static_cast<double>(a - b) : static_cast<double>(b - a);
  if (gap > tau_)
    fail("tau_mix", sim.now(), pid(from),
         fmt::format("exchange {} of {} (clock {}) and {} (clock {}): {} apart, TAU {}", h.exchange_id, pid(to), a, pid(from), b,
                     gap, tau_));
}

void InvariantChecker::check_peer(const Simulation& sim, std::uint32_t i) {
  Seen& seen = seen_[i];
  const double now = sim.now();
  const PeerState st = sim.state(i);
  const std::uint32_t life = sim.life(i);
  if (static_cast<int>(st) != seen.state || life != seen.life) {
    // A crash: its detection is checked once the bound has passed.
    if (st == PeerState::Crashed && (seen.state == static_cast<int>(PeerState::Training) ||
                                     seen.state == static_cast<int>(PeerState::Settling)))
      crashes_.push_back({i, seen.life, now});
    if (life != seen.life) {
      // A new process: its clock starts again, unless it resumed from its own model.
      if (!sim.resumed(i)) seen.clock = seen.told = 0;
      seen.reported_gap = false;
      seen.life = life;
    }
    seen.state = static_cast<int>(st);
    seen.progress_at = now;
    seen.reported_stuck = false;
  }
  const Gossip* g = sim.gossip(i);
  if (!g) return;
  const PeerLoop* loop = sim.loop(i);
  const int phase = loop ? static_cast<int>(loop->phase()) : -1;
  const std::uint64_t clock = sim.steps(i);
  if (clock < seen.clock)
    fail("clock", now, pid(i), fmt::format("clock went back from {} to {}", seen.clock, clock));
  // The clock it tells (its digest), once it trains: never behind its own model's clock.
  if (phase == static_cast<int>(LoopPhase::Training) && g->state_ready()) {
    const std::uint64_t told = g->view().self().clock;
    if (told < seen.told || (sim.resumed(i) && told < clock))
      fail("clock", now, pid(i), fmt::format("it tells clock {} (its model is at {}, it told {} before)", told, clock, seen.told));
    seen.told = std::max(seen.told, told);
  }
  // The loop's own record of its step starts: clock - slowest at each (LoopStats::max_gap).
  if (loop && std::isfinite(tau_) && phase == static_cast<int>(LoopPhase::Training)) {
    ++counts_.tau_step;
    if (static_cast<double>(loop->stats().max_gap) > tau_ && !seen.reported_gap) {
      seen.reported_gap = true;
      fail("tau_step", now, pid(i), fmt::format("started a step {} past the slowest clock it knew (TAU {})", loop->stats().max_gap, tau_));
    }
  }
  if (clock != seen.clock || phase != seen.phase) {
    seen.progress_at = now;
    seen.reported_stuck = false;
  }
  seen.clock = clock;
  seen.phase = phase;
  seen.slowest = g->slowest_clock();
  const auto open = g->open_exchanges();
  for (std::size_t a = 0; a < open.size(); ++a)
    for (std::size_t b = a + 1; b < open.size(); ++b)
      if (open[a].peer == open[b].peer)
        fail("one_exchange", now, pid(i), fmt::format("two exchanges open with {} ({} and {})", open[a].peer, open[a].id, open[b].id));
  const auto x = sim.params(i);
  if (!(loop && loop->stats().diverged)) {
    ++counts_.finite;
    for (std::size_t k = 0; k < x.size(); ++k)
      if (!std::isfinite(x[k])) {
        fail("finite", now, pid(i), fmt::format("parameter {} is {} in its model", k, x[k]));
        break;
      }
  }
}

void InvariantChecker::after_event(const Simulation& sim, std::int64_t peer) {
  ++counts_.events;
  const double now = sim.now();
  if (seen_.size() < sim.ids()) seen_.resize(sim.ids());
  if (!started_) {
    started_ = true;
    for (std::uint32_t i = 0; i < sim.ids(); ++i) seen_[i].life = sim.life(i);
    if (conservation_ && !sim.params(0).empty()) {
      const std::size_t d = sim.params(0).size();
      dims_ = {0, d / 2, d - 1};
      sum0_ = conserved_sums(sim, false);
    }
  }
  if (peer >= 0 && static_cast<std::uint32_t>(peer) < sim.ids()) {
    check_peer(sim, static_cast<std::uint32_t>(peer));
  } else {
    for (std::uint32_t i = 0; i < sim.ids(); ++i) check_peer(sim, i);
  }
  // Conservation costs a pass over every peer and message in flight: in large swarms it is
  // checked every ids/4 events (a lost or doubled half stays in the sum, so it is still seen).
  if (conservation_ && !dims_.empty() && counts_.events % std::max<std::uint64_t>(1, sim.ids() / 4) == 0) {
    ++counts_.conservation;
    const std::vector<double> sums = conserved_sums(sim, true);
    for (std::size_t k = 0; k < dims_.size(); ++k) {
      const double v = sums[k];
      if (std::abs(v - sum0_[k]) > 1e-4 * (1 + std::abs(sum0_[k]))) {
        fail("conservation", now, "", fmt::format("the sum of coordinate {} moved from {} to {}", dims_[k], sum0_[k], v));
        sum0_[k] = v;  // report each move once
      }
    }
  }
  // Crashed peers whose bound has passed: gone from every live view (an older incarnation).
  for (std::size_t k = 0; k < crashes_.size();) {
    const Crash c = crashes_[k];
    if (now < c.at + detection_bound_) {
      ++k;
      continue;
    }
    ++counts_.detection;
    for (std::uint32_t i = 0; i < sim.ids(); ++i) {
      const Gossip* g = sim.gossip(i);
      if (!g || i == c.peer) continue;
      const Member* m = g->view().find(pid(c.peer));
      if (m && m->live() && m->d.incarnation <= c.life) {
        fail("detection", now, pid(i),
             fmt::format("{} crashed at {:.6f} s and is still {} in its view after {:.3f} s (bound {:.3f} s)", pid(c.peer), c.at,
                         m->d.state == MemberState::Alive ? "alive" : "suspect", now - c.at, detection_bound_));
        break;
      }
    }
    crashes_.erase(crashes_.begin() + static_cast<std::ptrdiff_t>(k));
  }
  // A heal: heal_bound() later, every pair of peers running all along knows each other (a
  // later partition in force puts the check off until it heals too).
  if (sim.last_heal() >= 0 && sim.last_heal() != heal_seen_) {
    heal_seen_ = sim.last_heal();
    heals_.push_back(heal_seen_);
  }
  while (!heals_.empty() && now >= heals_.front() + heal_bound_ && !sim.partitioned_now()) {
    const double healed = heals_.front();
    heals_.erase(heals_.begin());
    // A partition since this heal: its own heal is checked later.
    if (sim.last_heal() > healed + 1e-12 && now < sim.last_heal() + heal_bound_) continue;
    ++counts_.heal;
    std::vector<std::uint32_t> all_along;
    for (std::uint32_t i = 0; i < sim.ids(); ++i)
      if (sim.gossip(i) && sim.state(i) == PeerState::Training && sim.started_at(i) < healed) all_along.push_back(i);
    bool broke = false;
    for (auto i : all_along) {
      for (auto j : all_along) {
        if (i == j) continue;
        const Member* m = sim.gossip(i)->view().find(pid(j));
        if (!m || !m->live()) {
          fail("heal", now, pid(i),
               fmt::format("{} is {} in its view {:.3f} s after the partition healed (bound {:.3f} s): split brain", pid(j),
                           m ? member_state_name(m->d.state) : "missing", now - healed, heal_bound_));
          broke = true;
          break;
        }
      }
      if (broke) break;
    }
  }
  // Liveness: a running peer that has made no progress for longer than the bound.
  if (peer < 0 || (counts_.events & 63) == 0) {
    for (std::uint32_t i = 0; i < sim.ids(); ++i) {
      Seen& s = seen_[i];
      if (!sim.gossip(i) || s.reported_stuck) continue;
      if (now - s.progress_at > liveness_bound_) {
        s.reported_stuck = true;
        const PeerLoop* l = sim.loop(i);
        fail("liveness", now, pid(i),
             fmt::format("no step, phase change or exit for {:.3f} s (bound {:.3f} s), in phase {} at clock {}", now - s.progress_at,
                         liveness_bound_, l ? loop_phase_name(l->phase()) : "?", sim.steps(i)));
      }
    }
  }
  if (now > run_bound_ && s_.duration <= 0 && !first_)
    fail("liveness", now, "", fmt::format("the run is not over by {:.3f} s (its bound)", run_bound_));
}

void InvariantChecker::at_end(const Simulation& sim) {
  if (s_.duration > 0) return;
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (sim.state(i) == PeerState::Training || sim.state(i) == PeerState::Settling) {
      fail("liveness", sim.now(), pid(i), fmt::format("still {} when the run ended", peer_state_name(sim.state(i))));
      break;
    }
}

}  // namespace rumor::sim
