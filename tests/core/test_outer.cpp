// Outer momentum for gossip (core/outer.hpp): the outer step's arithmetic, and what it does to
// a swarm of peers training on different quadratics with local steps (the in-memory cluster).
#include <doctest/doctest.h>

#include <cmath>

#include "cluster.hpp"
#include "core/outer.hpp"

using namespace rumor;
using namespace rumor::testing;

TEST_CASE("outer momentum: each step is DiLoCo's Nesterov step on the local progress since the last mix") {
  OuterOptimizer off(OuterConfig{});
  std::vector<float> x = {1, 2};
  off.begin(x);
  CHECK_FALSE(off.active());  // lr 1, momentum 0: plain gossip, nothing kept
  x = {0.5f, 2.5f};
  off.step(x);
  CHECK(x == std::vector<float>{0.5f, 2.5f});

  OuterOptimizer o(OuterConfig{0.7, 0.9, true});
  std::vector<float> y = {1, 2};
  o.begin(y);
  REQUIRE(o.active());
  y = {0.5f, 2.5f};  // the model after local steps, a mix about to land
  o.step(y);
  // delta = (0.5, -0.5); v = delta; x = a - 0.7 (delta + 0.9 v) = (1 - 0.665, 2 + 0.665)
  CHECK(y[0] == doctest::Approx(0.335));
  CHECK(y[1] == doctest::Approx(2.665));
  CHECK(o.anchor()[0] == 1);  // until the mix has landed
  CHECK(o.velocity()[0] == doctest::Approx(0.5));
  y[0] += 0.2f;  // the mix: the neighbour's pull is not part of the next delta
  o.rebase(y);
  CHECK(o.anchor()[0] == doctest::Approx(0.535));
  y[0] -= 0.1f;  // local progress of 0.1
  o.step(y);
  // delta = 0.1; v = 0.45 + 0.1 = 0.55; x = 0.535 - 0.7 (0.1 + 0.495) = 0.1185
  CHECK(y[0] == doctest::Approx(0.1185));
  CHECK(o.velocity()[0] == doctest::Approx(0.55));
  CHECK(o.steps() == 2);
  o.rebase(y);
  std::vector<float> still = y;
  o.step(still);  // no local progress: only the momentum left moves it (v = 0.495, x -= 0.7 * 0.9 * 0.495)
  CHECK(still[0] == doctest::Approx(y[0] - 0.7 * 0.9 * 0.495).epsilon(1e-5));

  OuterOptimizer hb(OuterConfig{0.5, 0.5, false});  // heavy ball: x = a - eta v
  std::vector<float> z = {0};
  hb.begin(z);
  z = {-1};
  hb.step(z);  // v = 1; x = -0.5
  CHECK(z[0] == doctest::Approx(-0.5));
  hb.rebase(z);
  z = {-1.5f};
  hb.step(z);  // delta = 1, v = 1.5, x = -0.5 - 0.75
  CHECK(z[0] == doctest::Approx(-1.25));
  hb.end();
  CHECK_FALSE(hb.active());
  z = {7};
  hb.step(z);
  CHECK(z[0] == 7);
}

namespace {

// 6 peers, each pulled to its own target t_i by gradient steps of `lr` (x -= lr (x - t_i)), an
// exchange every 4 steps. The swarm's optimum is the targets' mean. Returns the largest
// distance of a peer's model to it after `seconds`, and sets `spread` to the largest distance
// between two peers.
constexpr std::size_t kSwarmParams = 8;
constexpr int kSwarmPeers = 6;

// The swarm's peers p0..p5 joined through p0, each pulled to its own target (`target`, which
// must outlive the cluster's runs), training begun (outer momentum's anchors taken).
void build_quadratic_swarm(Cluster& c, const OuterConfig& outer, std::map<PeerId, std::vector<float>>& target) {
  c.cfg.local_steps = 4;
  c.cfg.outer = outer;
  for (int i = 0; i < kSwarmPeers; ++i) target["p" + std::to_string(i)] = random_params(kSwarmParams, 500 + i);
  c.local_step = [&target](Node& node) {
    const auto& t = target[node.env.self];
    for (std::size_t k = 0; k < kSwarmParams; ++k) node.params[k] -= 0.002f * (node.params[k] - t[k]);
  };
  for (int i = 0; i < kSwarmPeers; ++i)
    c.add("p" + std::to_string(i), std::vector<float>(kSwarmParams, 0.0f),
          i ? std::vector<PeerId>{"p0"} : std::vector<PeerId>{}, 40 + i);
  for (auto& [id, node] : c.nodes) node->g->begin_outer();
}

double quadratic_swarm(const OuterConfig& outer, double seconds, double* spread, std::uint64_t* outer_steps,
                       double* settled_spread) {
  Cluster c;
  const std::size_t P = kSwarmParams;
  const int n = kSwarmPeers;
  std::map<PeerId, std::vector<float>> target;
  build_quadratic_swarm(c, outer, target);
  std::vector<double> mean(P, 0.0);
  for (const auto& [id, t] : target)
    for (std::size_t k = 0; k < P; ++k) mean[k] += t[k] / n;
  c.run(seconds);
  double worst = 0, far = 0;
  *outer_steps = 0;
  for (const auto& [id, a] : c.nodes) {
    double d = 0;
    for (std::size_t k = 0; k < P; ++k) d += (a->params[k] - mean[k]) * (a->params[k] - mean[k]);
    worst = std::max(worst, std::sqrt(d));
    for (const auto& [id2, b] : c.nodes) far = std::max(far, static_cast<double>(relative_distance(a->params, b->params)));
    *outer_steps += a->g->outer().steps();
  }
  *spread = far;
  // Training ends: plain averaging (no outer steps once done) brings the models together.
  c.stepping = false;
  for (auto& [id, node] : c.nodes) node->g->set_done();
  for (int k = 1; k <= 200; ++k) {
    c.run(seconds + k * 0.01);
    for (auto& [id, node] : c.nodes) node->g->on_idle();
  }
  *settled_spread = 0;
  for (const auto& [id, a] : c.nodes)
    for (const auto& [id2, b] : c.nodes)
      *settled_spread = std::max(*settled_spread, static_cast<double>(relative_distance(a->params, b->params)));
  return worst;
}

}  // namespace

TEST_CASE("outer momentum: a swarm with local steps nears the optimum faster, and its peers agree once done") {
  double spread_plain = 0, spread_outer = 0, settled_plain = 0, settled_outer = 0;
  std::uint64_t steps_plain = 0, steps_outer = 0;
  // 0.5 s of 1 ms steps: 500 steps of lr 0.002 leave plain local SGD about e^-1 of the way.
  const double plain = quadratic_swarm(OuterConfig{}, 0.5, &spread_plain, &steps_plain, &settled_plain);
  const double outer = quadratic_swarm(OuterConfig{0.7, 0.9, true}, 0.5, &spread_outer, &steps_outer, &settled_outer);
  INFO("farthest peer from the optimum: plain " << plain << ", outer momentum " << outer << "; spread " << spread_plain
                                          << " / " << spread_outer << "; after settling " << settled_plain << " / "
                                          << settled_outer << "; outer steps " << steps_outer);
  CHECK(steps_plain == 0);
  CHECK(steps_outer > 300);  // one per mix, on both sides
  CHECK(outer < 0.8 * plain);
  // Each peer's momentum also amplifies its own pull towards its own target: the peers drift
  // further apart while they train (bounded: no divergence), and settling joins them again.
  CHECK(spread_outer < 1.0);
  CHECK(settled_outer < 1e-3);
  CHECK(settled_plain < 1e-3);
}

namespace {

// The quadratic swarm of quadratic_swarm() with outer momentum trains for `seconds`, then
// stops stepping and only mixes for 2 s, as a Python peer's serve() does after its last step
// (PeerLoop::pause). `end`: 0 training is over (set_done), 1 a pause (Gossip::pause_outer),
// 2 neither (the outer steps go on: what a pause did before pause_outer). Returns how far the
// swarm's mean model moved while it only mixed, relative to the mean's norm, and sets
// `steps_while_mixing` to the outer steps taken then and `spread` to the largest distance
// between two peers at the end.
double mean_drift_while_mixing(int end, std::uint64_t* steps_while_mixing, double* spread) {
  Cluster c;
  const std::size_t P = kSwarmParams;
  const int n = kSwarmPeers;
  std::map<PeerId, std::vector<float>> target;
  build_quadratic_swarm(c, OuterConfig{0.7, 0.9, true}, target);
  const double seconds = 0.5;
  c.run(seconds);
  c.stepping = false;
  c.run(seconds + 0.05);  // the exchanges in flight land
  const auto mean = [&] {
    std::vector<double> m(P, 0.0);
    for (const auto& [id, node] : c.nodes)
      for (std::size_t k = 0; k < P; ++k) m[k] += node->params[k] / n;
    return m;
  };
  const std::vector<double> m0 = mean();
  std::uint64_t steps0 = 0;
  for (auto& [id, node] : c.nodes) {
    steps0 += node->g->outer().steps();
    if (end == 0) node->g->set_done();
    if (end == 1) node->g->pause_outer(true);
  }
  for (int k = 1; k <= 200; ++k) {
    c.run(seconds + 0.05 + k * 0.01);
    for (auto& [id, node] : c.nodes) node->g->on_idle();
  }
  const std::vector<double> m1 = mean();
  double moved = 0, norm = 0;
  for (std::size_t k = 0; k < P; ++k) {
    moved += (m1[k] - m0[k]) * (m1[k] - m0[k]);
    norm += m0[k] * m0[k];
  }
  *steps_while_mixing = 0;
  *spread = 0;
  for (const auto& [id, a] : c.nodes) {
    *steps_while_mixing += a->g->outer().steps();
    for (const auto& [id2, b] : c.nodes) *spread = std::max(*spread, static_cast<double>(relative_distance(a->params, b->params)));
  }
  *steps_while_mixing -= steps0;
  return std::sqrt(moved / norm);
}

}  // namespace

TEST_CASE("outer momentum: a pause in training (serve()) mixes plainly, as settling does: the mean stays") {
  std::uint64_t steps_done = 0, steps_paused = 0, steps_on = 0;
  double spread_done = 0, spread_paused = 0, spread_on = 0;
  const double done = mean_drift_while_mixing(0, &steps_done, &spread_done);
  const double paused = mean_drift_while_mixing(1, &steps_paused, &spread_paused);
  const double on = mean_drift_while_mixing(2, &steps_on, &spread_on);
  INFO("mean moved while only mixing: done " << done << ", paused " << paused << ", outer steps on " << on
                                             << "; outer steps then " << steps_done << " / " << steps_paused << " / "
                                             << steps_on << "; spread " << spread_done << " / " << spread_paused << " / "
                                             << spread_on);
  CHECK(steps_paused == 0);
  CHECK(paused < 1e-5);  // plain averaging keeps the mean (float rounding only)
  CHECK(done < 1e-5);
  CHECK(spread_paused < 1e-3);
  // Without the pause the momentum left over keeps moving the models, and the mean with them.
  CHECK(steps_on > 50);
  CHECK(on > 100 * std::max(paused, 1e-7));
}
