// The int4 codec and fragments through the whole loop, in rumor-sim: a 4-peer MLP on the
// synthetic task trains to within about a point of codec none at the same steps, with a
// fraction of the bytes; and the run is deterministic.
#include <doctest/doctest.h>

#include <string>

#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor::sim;

namespace {

struct Result {
  double acc = 0, peer_acc_min = 0, consensus = 0;
  std::uint64_t bytes = 0, exchanges = 0;
  std::string events;
};

Result run(const std::string& gossip) {
  const std::string text =
      "[run]\npeers = 4\nseed = 2\nsettle = 1\n[workload]\nkind = model\ndata = synthetic\nmodel = mlp:32\n"
      "optimizer = adam\nlr = 3e-3\nbatch = 32\nsteps = 300\n[gossip]\nbootstrap = all\nlocal_steps = 4\n" +
      gossip +
      "\n[compute]\nstep_time = 5ms\ndist = lognormal\nsd = 0.3\n[network]\nlatency = 1ms\n"
      "[output]\nsample_every = 0.5\neval_rows = 1000\neval_peers = 4\n";
  Simulation sim(parse_scenario(text, "codecs", {}));
  sim.run();
  Result r;
  const Sample& last = sim.samples().back();
  r.acc = last.test_acc;
  r.peer_acc_min = last.peer_acc_min;
  r.consensus = last.consensus_distance;
  r.bytes = last.bytes;
  r.exchanges = last.exchanges;
  r.events = sim.events_csv();
  return r;
}

}  // namespace

TEST_CASE("codecs in rumor-sim: int4 and 4 fragments train a 4-peer MLP to within a point of codec none") {
  const Result none = run("codec = none");
  const Result int4 = run("codec = int4");
  const Result frag = run("codec = none\nfragments = 4");
  const Result both = run("codec = int4\nfragments = 4");
  const auto line = [](const char* name, const Result& r) {
    return std::string(name) + ": accuracy " + std::to_string(r.acc) + " (worst peer " + std::to_string(r.peer_acc_min) + "), " +
           std::to_string(r.bytes) + " bytes, " + std::to_string(r.exchanges) + " exchanges, consensus " + std::to_string(r.consensus);
  };
  MESSAGE(line("none", none) << "\n" << line("int4", int4) << "\n" << line("fragments 4", frag) << "\n" << line("int4 + fragments 4", both));
  CHECK(none.acc > 0.5);  // it learns something: the comparison means something
  for (const Result* r : {&int4, &frag, &both}) {
    CHECK(r->acc > none.acc - 0.012);
    CHECK(r->peer_acc_min > none.peer_acc_min - 0.015);
    CHECK(r->bytes < none.bytes);
  }
  // int4: 0.5625 bytes per value, 1/7 of float32's 4 (a few absolute int8 exchanges at first);
  // fragments: a quarter of the bytes per exchange. The model has 2,410 parameters, so the
  // messages' headers (a few hundred bytes each, the view digest included) weigh: measured
  // 1/5.3, 1/3.2 and 1/9 of codec none's bytes.
  CHECK(int4.bytes * 5 < none.bytes);
  CHECK(frag.bytes * 3 < none.bytes);
  CHECK(both.bytes * 8 < none.bytes);
  // Deterministic for a seed, like everything in the simulator.
  CHECK(run("codec = int4\nfragments = 4").events == both.events);
}

TEST_CASE("codecs in rumor-sim: topk with fragments > 1 is refused with the reason") {
  const std::string text = "[run]\npeers = 2\n[workload]\nkind = quadratic\nsteps = 10\n[gossip]\ncodec = topk\nfragments = 2\n";
  CHECK_THROWS_WITH(parse_scenario(text, "topk", {}), doctest::Contains("topk does not combine with fragments"));
}
