// An in-memory cluster of Gossip instances with virtual time (no sockets, no threads): core's
// unit-test fixture, below PeerLoop (the whole peer is tested through Simulation::step() in
// tests/sim and over both worlds in tests/peer/test_two_worlds.cpp). Events are ordered by
// (time, sequence) in the simulator's own queue (core/timed_queue.hpp); messages take
// `latency`; a crashed node's messages vanish and sends to it fail like a refused connection;
// `cut` drops messages on chosen links (a partial partition). Hooks let a test train between
// exchanges (`local_step`) or tamper with a node around each of its events (`before_event`,
// `after_event`: a byzantine peer, tests/core/test_robust.cpp).
#pragma once
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"
#include "core/timed_queue.hpp"

namespace rumor::testing {
using namespace rumor;

struct Cluster;

struct FixtureEnv final : Env {
  Cluster* c = nullptr;
  PeerId self;
  Rng r;
  std::vector<ProtocolEvent> events;
  std::vector<PeerId> disconnected;
  double now() const override;
  void send(const PeerId& to, Message msg) override;
  void set_timer(double d, std::uint64_t id) override;
  void disconnect(const PeerId& p) override { disconnected.push_back(p); }
  Rng& rng() override { return r; }
  void event(const ProtocolEvent& e) override { events.push_back(e); }
  std::function<CpuClocks()> cpu_clocks;  // Env::cpu(), when set
  CpuClocks cpu() const override { return cpu_clocks ? cpu_clocks() : CpuClocks{}; }
  std::size_t count(ProtocolEvent::Kind k) const {
    std::size_t n = 0;
    for (const auto& e : events) n += e.kind == k;
    return n;
  }
};

struct Node {
  std::vector<float> params;
  FixtureEnv env;
  std::unique_ptr<Gossip> g;
  bool alive = true;
  std::uint64_t clock = 0;
};

struct Cluster {
  struct Ev {
    double t;
    std::uint64_t seq;
    int kind;  // 0 step, 1 deliver, 2 timer, 3 send failed
    PeerId peer, from;
    std::shared_ptr<Message> msg;
    std::uint64_t timer = 0;
  };
  double now = 0, latency = 0.003, step_time = 0.001;
  bool stepping = true;  // false: no more steps, so no new exchanges; open ones complete
  std::set<std::pair<PeerId, PeerId>> cut;  // (from, to) links that drop everything
  // Drops the messages it returns true for (a lost reply or accept), when set.
  std::function<bool(const PeerId& from, const PeerId& to, const Message& m)> drop;
  // Changes a message on its way, when set (corrupted input that passes the frame checks).
  std::function<void(const PeerId& from, const PeerId& to, Message& m)> tamper;
  TimedQueue<Ev> q;
  std::map<PeerId, std::unique_ptr<Node>> nodes;
  GossipConfig cfg = [] {
    GossipConfig c;
    c.fetch_state = false;  // averaging tests: every peer keeps its own initial parameters
    c.local_steps = 1;      // an exchange due after every step (the default, auto, chooses H)
    return c;
  }();

  // Called on a node's step before Gossip hears of it (training between exchanges).
  std::function<void(Node&)> local_step;
  // The gap from a node's step to its next, when set (default: step_time): a CPU cap's
  // throttled periods, a pause.
  std::function<double(const Node&)> step_gap;
  // Called around every event a live node handles.
  std::function<void(Node&)> before_event, after_event;

  // `first_step`: when the node's first step ends (default: one step_time from now).
  Node& add(const PeerId& id, std::vector<float> p, const std::vector<PeerId>& seeds, std::uint64_t seed,
            double first_step = -1) {
    auto n = std::make_unique<Node>();
    n->params = std::move(p);
    n->env.c = this;
    n->env.self = id;
    n->env.r = Rng(seed);
    MemberDigest self{id, 0, MemberState::Alive, 0};
    n->g = std::make_unique<Gossip>(n->env, cfg, self, "fp", n->params);
    Node& ref = *n;
    nodes[id] = std::move(n);
    ref.g->start(seeds);
    push({first_step >= 0 ? first_step : now + step_time, 0, 0, id, {}, nullptr});
    return ref;
  }
  void push(Ev e) { q.push(std::move(e)); }
  double weighted_sum(std::size_t i) const {
    double s = 0;
    for (const auto& [id, n] : nodes) s += n->params[i];
    return s;
  }
  // Runs until virtual time `until`.
  void run(double until) {
    while (!q.empty() && q.top().t <= until) {
      const Ev e = q.pop();
      now = e.t;
      auto it = nodes.find(e.peer);
      if (it == nodes.end() || !it->second->alive) continue;
      Node& n = *it->second;
      if (e.kind == 0 && !stepping) continue;
      if (before_event) before_event(n);
      if (e.kind == 0) {
        if (local_step) local_step(n);
        ++n.clock;
        n.g->on_step_done(n.clock, n.clock * 10);
        push({now + (step_gap ? step_gap(n) : step_time), 0, 0, e.peer, {}, nullptr});
      } else if (e.kind == 1) {
        n.g->on_message(e.from, *e.msg);
      } else if (e.kind == 2) {
        n.g->on_timer(e.timer);
      } else {
        n.g->on_send_failed(e.from, "connection refused");
      }
      if (after_event) after_event(n);
    }
    now = until;
  }
};

inline double FixtureEnv::now() const { return c->now; }
inline void FixtureEnv::send(const PeerId& to, Message msg) {
  if (c->cut.count({self, to})) return;
  if (c->drop && c->drop(self, to, msg)) return;
  if (c->tamper) c->tamper(self, to, msg);
  auto it = c->nodes.find(to);
  if (it == c->nodes.end() || !it->second->alive) {
    // Unreachable: reported later, like a refused connection (never from inside send()).
    c->push({c->now + 0.001, 0, 3, self, to, nullptr});
    return;
  }
  c->push({c->now + c->latency, 0, 1, to, self, std::make_shared<Message>(std::move(msg))});
}
inline void FixtureEnv::set_timer(double d, std::uint64_t id) { c->push({c->now + std::max(d, 0.0), 0, 2, self, {}, nullptr, id}); }

inline std::vector<float> random_params(std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal());
  return v;
}


}  // namespace rumor::testing
