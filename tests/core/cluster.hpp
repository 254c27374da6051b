// An in-memory cluster of Gossip instances with virtual time (no sockets, no threads): a
// stepping fixture in the spirit of raft's. Events are ordered by (time, sequence); messages
// take `latency`; a crashed node's messages vanish and sends to it fail like a refused
// connection; `cut` drops messages on chosen links (a partial partition).
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <set>

#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"

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
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  double now = 0, latency = 0.003, step_time = 0.001;
  bool stepping = true;  // false: no more steps, so no new exchanges; open ones complete
  std::uint64_t seq = 0;
  std::set<std::pair<PeerId, PeerId>> cut;  // (from, to) links that drop everything
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> q;
  std::map<PeerId, std::unique_ptr<Node>> nodes;
  GossipConfig cfg = [] {
    GossipConfig c;
    c.fetch_state = false;  // averaging tests: every peer keeps its own initial parameters
    return c;
  }();

  Node& add(const PeerId& id, std::vector<float> p, const std::vector<PeerId>& seeds, std::uint64_t seed) {
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
    push({now + step_time, 0, 0, id, {}, nullptr});
    return ref;
  }
  void push(Ev e) {
    e.seq = seq++;
    q.push(std::move(e));
  }
  double weighted_sum(std::size_t i) const {
    double s = 0;
    for (const auto& [id, n] : nodes) s += n->params[i];
    return s;
  }
  // Runs until virtual time `until`; checks conservation of the parameter sum after each event
  // when `check_sum` (exchanges only conserve it once both halves are applied, so the check is
  // on the sum including the halves still in flight: tracked through `pending`).
  void run(double until) {
    while (!q.empty() && q.top().t <= until) {
      Ev e = q.top();
      q.pop();
      now = e.t;
      auto it = nodes.find(e.peer);
      if (it == nodes.end() || !it->second->alive) continue;
      Node& n = *it->second;
      if (e.kind == 0) {
        if (!stepping) continue;
        ++n.clock;
        n.g->on_step_done(n.clock, n.clock * 10);
        push({now + step_time, 0, 0, e.peer, {}, nullptr});
      } else if (e.kind == 1) {
        n.g->on_message(e.from, *e.msg);
      } else if (e.kind == 2) {
        n.g->on_timer(e.timer);
      } else {
        n.g->on_send_failed(e.from, "connection refused");
      }
    }
    now = until;
  }
};

inline double FixtureEnv::now() const { return c->now; }
inline void FixtureEnv::send(const PeerId& to, Message msg) {
  if (c->cut.count({self, to})) return;
  auto it = c->nodes.find(to);
  if (it == c->nodes.end() || !it->second->alive) {
    // Unreachable: reported later, like a refused connection (never from inside send()).
    c->push({c->now + 0.001, 0, 3, self, to, nullptr});
    return;
  }
  c->push({c->now + c->latency, 0, 1, to, self, std::make_shared<Message>(std::move(msg))});
}
inline void FixtureEnv::set_timer(double d, std::uint64_t id) { c->push({c->now + d, 0, 2, self, {}, nullptr, id}); }

inline std::vector<float> random_params(std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal());
  return v;
}


}  // namespace rumor::testing
