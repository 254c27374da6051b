// Outer momentum (core/outer.hpp) through the whole loop, in rumor-sim: PeerLoop takes the
// anchor when training begins, every mix takes an outer step, settling is plain averaging.
#include <doctest/doctest.h>

#include <string>

#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor::sim;

namespace {

// 8 peers on the quadratic f(x) = 1/2 |x|^2 (d = 20, from x0 = 1, slight gradient noise) with a
// small learning rate and an exchange every 8 steps: plain local SGD relaxes as exp(-lr t).
struct Result {
  double loss_at_100 = 0, final_loss = 0, final_spread = 0, final_consensus = 0;
  std::string events;
};

Result run(const std::string& outer) {
  const std::string text =
      "[run]\npeers = 8\nseed = 5\nsettle = 60\n[workload]\nkind = quadratic\ndim = 20\nlr = 0.005\nnoise = 0.01\n"
      "x0 = 1\nsteps = 200\n[gossip]\nbootstrap = all\nlocal_steps = 8\n" + outer +
      "\n[compute]\nstep_time = 1\ndist = exponential\n[network]\nlatency = 1ms\n[output]\nsample_every = 2\neval_peers = 0\n";
  Simulation sim(parse_scenario(text, "outer", {}));
  sim.run();
  Result r;
  for (const Sample& s : sim.samples())
    if (s.time <= 100) r.loss_at_100 = s.loss;
  r.final_loss = sim.samples().back().loss;
  r.final_spread = sim.samples().back().spread;
  r.final_consensus = sim.samples().back().consensus_distance;
  r.events = sim.events_csv();
  return r;
}

}  // namespace

TEST_CASE("outer momentum: the loop's peers relax several times faster and agree once settled") {
  const Result plain = run("");
  const Result outer = run("outer_lr = 0.7\nouter_momentum = 0.9");
  MESSAGE("f(xbar) at t=100: plain " << plain.loss_at_100 << ", outer momentum " << outer.loss_at_100
                                     << "; at the end " << plain.final_loss << " / " << outer.final_loss
                                     << "; spread after settling " << plain.final_spread << " / " << outer.final_spread
                                     << " (relative " << plain.final_consensus << " / " << outer.final_consensus << ")");
  // 100 steps of lr 0.005 leave plain SGD at exp(-1) of |x0|^2/2 = 10 (f ~ 3.7); the outer steps
  // act as a learning rate up to eta / (1 - mu) = 7 times larger.
  CHECK(plain.loss_at_100 > 2.5);
  CHECK(outer.loss_at_100 < 0.3 * plain.loss_at_100);
  CHECK(outer.final_loss < plain.final_loss);
  CHECK(outer.final_consensus < 0.02);  // settling without outer steps joins the models again
  // Deterministic for a seed, like everything in the simulator.
  CHECK(run("outer_lr = 0.7\nouter_momentum = 0.9").events == outer.events);
}
