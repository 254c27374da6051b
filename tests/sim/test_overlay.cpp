// Partial views (core/overlay.hpp, core/gossip_overlay.cpp) in rumor-sim: the properties of
// issue 30 at test sizes (docs/sim.md "Partial views"; the large sizes and the long churn are
// bench/overlay_properties.sh). Pure averaging (training off, a 16-float model), exponential
// ticks of 1 s, joining through p0, latency 1 ms.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sim/overlay.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor;
using namespace rumor::sim;

namespace {

std::string averaging(int n, int seed, double duration, const std::string& view, const std::string& extra = {}) {
  return "[run]\npeers = " + std::to_string(n) + "\nseed = " + std::to_string(seed) +
         "\nduration = " + std::to_string(duration) +
         "\nsettle = 0\n[workload]\nkind = quadratic\ntraining = off\ndim = 16\ninit_mean = 1\ninit_sd = 1\n"
         "[gossip]\nbootstrap = seed\nview = " + view +
         "\n[compute]\nstep_time = 1\ndist = exponential\n[network]\nlatency = 1ms\n[output]\nsample_every = 0.5\n" + extra;
}

Scenario scn(const std::string& text) { return parse_scenario(text, "test.ini", {}); }

std::string describe(const OverlayGraph& g) {
  return "live " + std::to_string(g.live) + ", components " + std::to_string(g.components) + ", largest " +
         std::to_string(g.largest) + ", mean active " + std::to_string(g.mean_active) + ", max active " +
         std::to_string(g.max_active) + ", max passive " + std::to_string(g.max_passive) + ", max members " +
         std::to_string(g.max_members) + ", dead links " + std::to_string(g.dead_links) + ", one-way " +
         std::to_string(g.one_way);
}

// Slope of ln(m) against time, over the points where m is between hi and lo times m[0]
// (tests/sim/test_theory.cpp's estimate).
double decay_rate(const std::vector<Sample>& s, double hi, double lo) {
  double st = 0, sy = 0, stt = 0, sty = 0;
  int n = 0;
  // From the first sample with every peer in (they join through p0 in the first milliseconds).
  double m0 = 0;
  for (const Sample& x : s)
    if (x.peers == s.back().peers && x.consensus_distance > 0) {
      m0 = x.consensus_distance * x.consensus_distance;
      break;
    }
  for (const Sample& x : s) {
    const double m = x.consensus_distance * x.consensus_distance;
    if (m > hi * m0 || m < lo * m0 || m <= 0) continue;
    st += x.time;
    sy += std::log(m);
    stt += x.time * x.time;
    sty += x.time * std::log(m);
    ++n;
  }
  REQUIRE(n > 5);
  return -(n * sty - st * sy) / (n * stt - st * st);
}

}  // namespace

TEST_CASE("overlay: 1,000 peers joining at once through one seed form one connected overlay of bounded views") {
  Simulation sim(scn(averaging(1000, 1, 10, "partial")));
  sim.run_until(10);
  const OverlayGraph g = overlay_graph(sim);
  MESSAGE(describe(g));
  CHECK(g.live == 1000);
  CHECK(g.partial == 1000);
  CHECK(g.connected());
  // log2(64) + 1 = 7 (the size estimate of a swarm that starts partial), passive 6 x 7.
  CHECK(g.max_active <= 7);
  CHECK(g.max_passive <= 42);
  CHECK(g.max_members <= 2 * (7 + 42) + 16);
}

TEST_CASE("overlay: under continuous churn (1% of the peers replaced per second) the live overlay stays connected") {
  // n = 1,000: 10 crashes and 10 joins per second for 10 s (the bench runs 10 minutes and 10,000).
  Simulation sim(scn(averaging(1000, 2, 25, "partial", "[churn]\ncrash_rate = 10\njoin_rate = 10\nfrom = 10\nuntil = 20\n")));
  std::size_t worst_components = 0, samples = 0;
  OverlayGraph worst;
  for (double t = 10; t <= 25; t += 0.5) {
    sim.run_until(t);
    const OverlayGraph g = overlay_graph(sim);
    ++samples;
    if (g.components > worst_components) {
      worst_components = g.components;
      worst = g;
    }
  }
  MESSAGE("worst of " << samples << " samples: " << describe(worst) << "; crashes " << sim.totals().crashes
                      << ", joins " << sim.totals().joins);
  CHECK(worst_components == 1);
  CHECK(sim.totals().crashes >= 70);
}

TEST_CASE("overlay: after 50% of the peers crash at once the survivors reconnect within 3 shuffle periods and keep averaging") {
  std::string crashes = "[churn]\n";
  for (int i = 0; i < 500; ++i) crashes += "crash = random at 10\n";
  Simulation sim(scn(averaging(1000, 3, 30, "partial", crashes)));
  sim.run_until(10.001);
  const OverlayGraph at = overlay_graph(sim);
  MESSAGE("just after: " << describe(at));
  const double period = sim.gossip(0) ? sim.gossip(0)->config().shuffle_interval_s : 2.0;
  sim.run_until(10 + 3 * period);
  const OverlayGraph g = overlay_graph(sim);
  MESSAGE("3 shuffle periods later: " << describe(g));
  CHECK(g.live == 500);
  CHECK(g.connected());
  const std::uint64_t before = sim.totals().exchanges;
  sim.run_until(30);
  const std::uint64_t done = sim.totals().exchanges - before;
  MESSAGE("exchanges completed in the next " << (30 - 10 - 3 * period) << " s: " << done);
  CHECK(done > 0.6 * 500 * (30 - 10 - 3 * period));
  CHECK(overlay_graph(sim).connected());
}

TEST_CASE("overlay: pure averaging on partial views contracts within 20% of the complete graph's rate") {
  // The same 200 peers, 3 seeds each: full views (the complete graph) against partial views
  // (active view 7, every 2nd partner from the passive view).
  const int n = 200;
  double full = 0, partial = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    Simulation f(scn(averaging(n, seed, 30, "full")));
    f.run();
    full += decay_rate(f.samples(), 0.09, 1e-10) / 3;
    Simulation p(scn(averaging(n, seed, 30, "partial")));
    p.run();
    partial += decay_rate(p.samples(), 0.09, 1e-10) / 3;
  }
  MESSAGE("decay rate of consensus_distance^2 per second: complete " << full << ", partial " << partial);
  CHECK(partial >= 0.8 * full);
}

TEST_CASE("overlay: a crashed peer leaves every live active view within a bounded time") {
  std::string crashes = "[churn]\n";
  for (int i = 0; i < 20; ++i) crashes += "crash = random at 10\n";
  Simulation sim(scn(averaging(1000, 4, 30, "partial", crashes)));
  sim.run_until(10);
  sim.run_until(10.0001);
  std::vector<std::uint32_t> victims;
  for (std::uint32_t i = 0; i < sim.ids(); ++i)
    if (sim.state(i) == PeerState::Crashed) victims.push_back(i);
  REQUIRE(victims.size() == 20);
  std::vector<double> gone(victims.size(), -1);
  for (double t = 10.05; t <= 30 && std::count(gone.begin(), gone.end(), -1.0) > 0; t += 0.05) {
    sim.run_until(t);
    for (std::size_t k = 0; k < victims.size(); ++k)
      if (gone[k] < 0 && active_holders(sim, victims[k]) == 0) gone[k] = t - 10;
  }
  std::sort(gone.begin(), gone.end());
  MESSAGE("seconds until a crashed peer is in no live active view: median " << gone[gone.size() / 2] << ", max "
                                                                              << gone.back());
  CHECK(gone.front() >= 0);
  CHECK(gone.back() <= 10);
}

TEST_CASE("overlay: 1,000 peers joining at once through one seed all get the model, spread over the swarm") {
  // 200 peers average for 20 s (so their model is not the shared initialisation), then 1,000
  // join through p0 at once.
  Simulation sim(scn(averaging(200, 5, 30, "partial", "[churn]\njoin = 1000 at 20\n")));
  sim.run_until(20);
  std::vector<std::uint64_t> served_before(200);
  for (std::uint32_t i = 0; i < 200; ++i)
    served_before[i] = sim.gossip(i) ? sim.gossip(i)->stats().state_served : 0;  // the founders' joins
  // At a time: the joiners' snapshots a member holds (a 16-float model goes in one chunk, so
  // that is mostly none), and the transfers a member starts within 100 ms (the burst).
  std::size_t held = 0, most_in_100ms = 0;
  std::vector<std::uint64_t> last(sim.ids(), 0);
  for (std::uint32_t i = 0; i < 200; ++i) last[i] = served_before[i];
  for (double t = 20.1; t <= 30; t += 0.1) {
    sim.run_until(t);
    held = std::max(held, max_transfers_serving(sim));
    for (std::uint32_t i = 0; i < sim.ids(); ++i)
      if (const Gossip* g = sim.gossip(i)) {
        most_in_100ms = std::max<std::size_t>(most_in_100ms, g->stats().state_served - last[i]);
        last[i] = g->stats().state_served;
      }
  }
  std::size_t got = 0, joiners = 0;
  std::uint64_t most_served = 0;
  for (std::uint32_t i = 0; i < sim.ids(); ++i) {
    const Gossip* g = sim.gossip(i);
    if (!g) continue;
    most_served = std::max(most_served, g->stats().state_served - (i < 200 ? served_before[i] : 0));
    if (i >= 200) {
      ++joiners;
      got += g->adopted_step().has_value();
    }
  }
  MESSAGE("joiners " << joiners << ", got the model " << got << "; most transfers one member served: " << most_served
                     << " in all, " << most_in_100ms << " within 100 ms, " << held << " snapshots held at once");
  CHECK(joiners == 1000);
  CHECK(got == 1000);
  CHECK(held <= 4);
  CHECK(most_served <= 25);  // 1,000 transfers over 200 sources: 5 each on average
}
