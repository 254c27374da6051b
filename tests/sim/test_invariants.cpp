// The simulator as a stepping fixture, in the spirit of raft's: Simulation::step() fires one
// event, and after EVERY event (the after-event hook) the protocol's safety properties are
// checked on the whole swarm:
//  - mixing conserves the sum of the parameters (training off, i.e. lr 0; uniform weights):
//    the live parameters plus what initiators still owe for exchanges their responder already
//    mixed (the accept, or the reply carrying y_s, still on its way or queued);
//  - no mix across clocks more than TAU apart (the snapshot clocks of every request and reply);
//  - a peer's clock never decreases, and once it knows every member it never starts a step
//    more than TAU past the slowest of them;
//  - no peer has two open exchanges with the same partner.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <sstream>
#include <string>

#include "core/protocol_messages.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor;
using namespace rumor::sim;

namespace {

Scenario scn(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_scenario(text, "test.ini", sets);
}

// Pure averaging with exchanges that overlap: latency of several ticks, two open exchanges per
// peer, a slow class (so TAU binds), exponential ticks.
const char* kAveraging = R"(
[run]
peers = 10
seed = 3
settle = 0
[workload]
kind = quadratic
training = off
dim = 16
init_mean = 1
init_sd = 1
steps = 150
[class.fast]
count = 8
step_time = 10ms
dist = exponential
[class.slow]
count = 2
step_time = 30ms
dist = exponential
[network]
latency = 15ms
jitter = 5ms
bandwidth = 10Mbit
[gossip]
bootstrap = all
staleness = 2
exchange_timeout = 30
[output]
log_exchanges = on
sample_every = 0.5
)";

// The sum over coordinate `c` of the peers that have a model (running or done)' parameters plus what initiators still owe:
// for an exchange whose responder mixed (an ExchangeAccept in flight, or already received),
// the initiator will apply b/(a+b) (y_s - x_s), y_s from the held reply or the one in flight.
double conserved_sum(const Simulation& sim, std::size_t c, std::size_t* owed = nullptr) {
  double s = 0;
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (sim.state(i) != PeerState::Crashed && sim.state(i) != PeerState::Left && !sim.params(i).empty())
      s += sim.params(i)[c];
  // A reply may travel in chunks (a large model): those held by the initiator, then those in flight.
  std::map<std::tuple<PeerId, PeerId, std::uint64_t>, const Message*> accepts;
  std::map<std::tuple<PeerId, PeerId, std::uint64_t>, std::vector<const Message*>> replies;
  sim.for_each_message_in_flight([&](const PeerId& from, const PeerId& to, const Message& m) {
    if (m.type == MsgType::ExchangeAccept) accepts[{from, to, decode_exchange(m).exchange_id}] = &m;
    if (m.type == MsgType::ExchangeReply) replies[{from, to, decode_exchange(m).exchange_id}].push_back(&m);
  });
  for (std::uint32_t i = 0; i < sim.ids(); ++i) {
    const Gossip* g = sim.gossip(i);
    if (!g) continue;
    const PeerId me = "p" + std::to_string(i);
    for (const auto& o : g->open_exchanges()) {
      const auto key = std::make_tuple(o.peer, me, o.id);
      if (!o.accepted && !accepts.count(key)) continue;  // the responder has not mixed (yet)
      std::vector<const Message*> reply = o.reply;
      if (replies.count(key)) reply.insert(reply.end(), replies[key].begin(), replies[key].end());
      const Message* holder = nullptr;
      for (const Message* m : reply) {
        const ExchangeMsg h = decode_exchange(*m);
        if (c >= h.offset && c < h.offset + h.floats_here()) holder = m;
      }
      REQUIRE_MESSAGE(holder, "exchange ", o.id, " of ", me, " accepted but its reply is nowhere");
      const ExchangeMsg h = decode_exchange(*holder);
      const auto ys = as_floats(*holder->payload);
      s += h.weight / (o.weight + h.weight) * (static_cast<double>(ys[c - h.offset]) - o.snapshot[c]);
      if (owed) ++*owed;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("invariants: after every event, mixing conserves the sum, clocks respect TAU and never decrease") {
  Simulation sim(scn(kAveraging));
  const std::size_t dims[] = {0, 7, 15};
  std::map<std::size_t, double> s0;
  struct Seen {
    std::uint64_t clock = 0, slowest = 0;
    std::optional<std::uint64_t> knows_all_at;  // our clock when every member was first in the view
  };
  std::map<std::uint32_t, Seen> last;
  std::size_t bound_checks = 0;
  std::size_t events = 0, half_applied = 0;
  std::map<std::tuple<PeerId, PeerId, std::uint64_t>, std::uint64_t> request_clock;  // (initiator, responder, id)
  std::set<std::tuple<PeerId, PeerId, std::uint64_t>> replies_checked;
  std::size_t violations = 0;
  bool first = true;
  sim.set_after_event([&](const Simulation& s) {
    ++events;
    for (std::size_t c : dims) {
      const double now = conserved_sum(s, c, c == 0 ? &half_applied : nullptr);
      if (first) s0[c] = now;
      if (std::abs(now - s0[c]) > 1e-4 * (1 + std::abs(s0[c]))) {
        ++violations;
        FAIL_CHECK("sum of coordinate " << c << " moved from " << s0[c] << " to " << now << " at t=" << s.now());
      }
    }
    first = false;
    for (std::uint32_t i = 0; i < s.ids(); ++i) {
      const Gossip* g = s.gossip(i);
      if (!g) continue;
      const std::uint64_t clock = s.steps(i);
      Seen& seen = last[i];
      CHECK_MESSAGE(clock >= seen.clock, "p", i, " clock went back");
      // A step that ended in this event started at seen.clock, after the previous event. Once a
      // peer knows every member (and nobody joins), the slowest clock it knows only grows, so
      // the step's start saw slowest <= seen.slowest: it may only have started within TAU.
      if (clock > seen.clock && seen.knows_all_at && seen.clock > *seen.knows_all_at) {
        ++bound_checks;
        CHECK_MESSAGE(seen.clock <= seen.slowest + 2, "p", i, " stepped at ", seen.clock, " with slowest ", seen.slowest);
      }
      seen.clock = clock;
      seen.slowest = g->slowest_clock();
      if (!seen.knows_all_at && g->view().live_count() + 1 == s.ids()) seen.knows_all_at = clock;
      std::map<PeerId, int> partners;
      for (const auto& o : g->open_exchanges()) {
        CHECK_MESSAGE(++partners[o.peer] == 1, "p", i, " has two exchanges open with ", o.peer);
      }
    }
    // Every exchange request and reply is on the wire for at least one event: the request
    // carries the initiator's clock at its snapshot x_s, the reply the responder's at y_s, and
    // those two models are what both sides mix. Their clocks are at most TAU apart.
    s.for_each_message_in_flight([&](const PeerId& from, const PeerId& to, const Message& m) {
      if (m.type == MsgType::ExchangeRequest) {
        const ExchangeMsg h = decode_exchange(m);
        request_clock[{from, to, h.exchange_id}] = h.clock;
      } else if (m.type == MsgType::ExchangeReply) {
        const ExchangeMsg h = decode_exchange(m);
        const auto it = request_clock.find({to, from, h.exchange_id});
        REQUIRE_MESSAGE(it != request_clock.end(), "a reply to a request never seen");
        if (replies_checked.insert(it->first).second) {
          const std::uint64_t a = it->second, b = h.clock;
          CHECK_MESSAGE((a > b ? a - b : b - a) <= 2, "exchange of clocks ", a, " and ", b);
        }
      }
    });
  });
  while (sim.step()) {
  }
  INFO("events " << events << ", replies checked " << replies_checked.size());
  CHECK(violations == 0);
  CHECK(events > 5000);
  CHECK(replies_checked.size() > 500);  // the checks above saw plenty of exchanges
  CHECK(half_applied > 0);     // ... some caught between the responder's mix and the initiator's
  CHECK(bound_checks > 1000);  // the staleness bound was checked at most steps
  for (std::uint32_t i = 0; i < sim.ids(); ++i) CHECK(sim.steps(i) == 150);
}

TEST_CASE("invariants: step() fires one event at a time and gives the same run as run()") {
  Simulation a(scn(kAveraging, {"workload.steps=40"}));
  Simulation b(scn(kAveraging, {"workload.steps=40"}));
  std::size_t na = 0, nb = 0;
  a.set_after_event([&](const Simulation&) { ++na; });
  b.set_after_event([&](const Simulation&) { ++nb; });
  std::size_t steps = 0;
  while (a.step()) {
    ++steps;
    CHECK(na == steps);  // exactly one event per step()
  }
  b.run();
  CHECK(na == nb);
  CHECK(a.events_csv() == b.events_csv());
  CHECK(a.timeseries_csv() == b.timeseries_csv());
  CHECK(a.summary_json() == b.summary_json());
}
