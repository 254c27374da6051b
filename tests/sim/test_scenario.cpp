// Scenario files: the format of docs/sim.md, and that every mistake is an error naming the
// place (file:line or --set) and the key.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/knobs.hpp"
#include "sim/scenario.hpp"
#include "sim/topology.hpp"

using namespace rumor::sim;

namespace {

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    parse_scenario(text, "test.ini", sets);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

const char* kBase = "[run]\npeers = 8\nduration = 10\n";

}  // namespace

TEST_CASE("scenario: keys, units, classes and defaults") {
  const Scenario s = parse_scenario(R"(
# a comment
[run]
seed = 7
duration = 2min
[workload]
kind = quadratic
dim = 10
curvature = 0.1..10
lr = 0.01
[gossip]
topology = ring
local_steps = 4
[network]
latency = 20ms
jitter = 1ms
loss = 0.01
[compute]
step_time = 5ms
[class.gpu]
count = 4
step_time = 10ms
bandwidth = 10Gbit
[class.cpu]
count = 12
dist = lognormal
sd = 0.3
[output]
sample_every = 500ms
)",
                                    "t.ini", {});
  CHECK(s.seed == 7);
  CHECK(s.duration == doctest::Approx(120));
  CHECK(s.workload == WorkloadKind::Quadratic);
  CHECK(s.curvature_min == doctest::Approx(0.1));
  CHECK(s.curvature_max == doctest::Approx(10));
  CHECK(s.topology == Topology::Ring);
  CHECK(s.loop.gossip.local_steps == 4);
  CHECK(s.latency == doctest::Approx(0.02));
  CHECK(s.jitter == doctest::Approx(0.001));
  REQUIRE(s.classes.size() == 2);
  CHECK(s.classes[0].name == "gpu");
  CHECK(s.classes[0].count == 4);
  CHECK(s.classes[0].step_time == doctest::Approx(0.01));
  CHECK(s.classes[0].bandwidth == doctest::Approx(1.25e9));
  CHECK(s.classes[1].step_time == doctest::Approx(0.005));  // [compute] is the default
  CHECK(s.classes[1].dist == StepDist::Lognormal);
  CHECK(s.founders == 16);
  CHECK(s.total_ids == 16);
  CHECK(s.sample_every == doctest::Approx(0.5));
}

TEST_CASE("scenario: unknown keys, sections and bad values name the line and the key") {
  auto e = error_of(std::string(kBase) + "[network]\nlatncy = 5ms\n");
  CHECK(e.find("test.ini:5") != std::string::npos);
  CHECK(e.find("network.latncy") != std::string::npos);
  CHECK(e.find("unknown key") != std::string::npos);

  e = error_of(std::string(kBase) + "[netwrk]\n");
  CHECK(e.find("test.ini:4") != std::string::npos);
  CHECK(e.find("unknown section") != std::string::npos);

  e = error_of(std::string(kBase) + "[network]\nlatency = fast\n");
  CHECK(e.find("test.ini:5: network.latency") != std::string::npos);

  e = error_of(std::string(kBase) + "[network]\nlatency = 5 parsecs\n");
  CHECK(e.find("unknown time unit") != std::string::npos);

  e = error_of(std::string(kBase) + "[network]\nloss = 1.5\n");
  CHECK(e.find("network.loss") != std::string::npos);

  e = error_of(std::string(kBase) + "[gossip]\ntopology = moebius\n");
  CHECK(e.find("test.ini:5: gossip.topology") != std::string::npos);
  CHECK(e.find("ring") != std::string::npos);

  e = error_of(std::string(kBase) + "[workload]\ninit = xavier\n");
  CHECK(e.find("test.ini:5: workload.init") != std::string::npos);
  CHECK(e.find("he, torch") != std::string::npos);

  e = error_of(std::string(kBase) + "[gossip]\nmax_in_flight = 3\n");
  CHECK(e.find("gossip.max_in_flight") != std::string::npos);

  e = error_of(std::string(kBase) + "[run]\npeers = many\n");
  CHECK(e.find("run.peers") != std::string::npos);

  e = error_of("[run]\nduration = 5\n");
  CHECK(e.find("run.peers") != std::string::npos);

  e = error_of(std::string(kBase) + "just words\n");
  CHECK(e.find("test.ini:4") != std::string::npos);

  e = error_of(std::string(kBase) + "[gossip]\ntopology = hypercube\n[run]\npeers = 12\n");
  CHECK(e.find("power-of-two") != std::string::npos);
}

TEST_CASE("scenario: --set overrides, appends list keys, and reports its own place") {
  const Scenario s = parse_scenario(std::string(kBase) + "[network]\nlatency = 1ms\n",
                                    "t.ini", {"network.latency=7ms", "churn.crash=p3 at 2", "churn.crash=p4 at 3", "run.seed=99"});
  CHECK(s.latency == doctest::Approx(0.007));
  CHECK(s.seed == 99);
  REQUIRE(s.churn.size() == 2);
  CHECK(s.churn[0].peer == 3);
  CHECK(s.churn[1].at == doctest::Approx(3));
  const auto e = error_of(kBase, {"network.bandwith=1Gbit"});
  CHECK(e.find("--set #1") != std::string::npos);
  CHECK(e.find("network.bandwith") != std::string::npos);
  CHECK(error_of(kBase, {"nodot=1"}).find("section.key") != std::string::npos);
}

TEST_CASE("scenario: peer sets, partitions, links, stragglers and churn lines") {
  const Scenario s = parse_scenario(R"(
[run]
duration = 100
[class.fast]
count = 4
[class.slow]
count = 4
[network]
partition = p0..p3 from 10 to 20
partition = p0,p2 | slow from 30 to 40
link = fast | slow latency=30ms bandwidth=100Mbit
[compute]
straggler = p1 at 5 x4 until 50
straggler = 25% at 10 x 2
[churn]
crash = p3 at 12.5
leave = p1 at 30
join = at 20
join = 2 at 25 class slow
join = p3 at 40
)",
                                    "t.ini", {});
  CHECK(s.total_ids == 11);  // 8 founders + 3 new ids (p3's join is a restart)
  REQUIRE(s.partitions.size() == 2);
  CHECK(s.partitions[0].a == PeerSet{0, 1, 2, 3});
  CHECK(s.partitions[0].b == PeerSet{4, 5, 6, 7, 8, 9, 10});  // everyone else, joiners too
  CHECK(s.partitions[1].b == PeerSet{4, 5, 6, 7, 9, 10});     // class slow: founders + its joiners
  REQUIRE(s.links.size() == 1);
  CHECK(s.links[0].latency == doctest::Approx(0.03));
  CHECK(s.links[0].bandwidth == doctest::Approx(12.5e6));
  REQUIRE(s.stragglers.size() == 2);
  CHECK(s.stragglers[0].who == PeerSet{1});
  CHECK(s.stragglers[0].factor == doctest::Approx(4));
  CHECK(s.stragglers[0].until == doctest::Approx(50));
  CHECK(s.stragglers[1].fraction == doctest::Approx(0.25));
  REQUIRE(s.churn.size() == 6);
  CHECK(s.churn[0].kind == ChurnAction::Kind::Crash);
  CHECK(s.churn[1].kind == ChurnAction::Kind::Join);
  CHECK(s.churn[1].peer == 8);
  CHECK(s.churn[5].peer == 3);  // the restart
  CHECK(error_of("[run]\npeers = 4\nduration = 9\n[churn]\ncrash = p9 at 1\n").find("p9 does not exist") != std::string::npos);
  CHECK(error_of("[run]\npeers = 4\nduration = 9\n[network]\npartition = p0..p9 from 1 to 2\n").find("past the last") !=
        std::string::npos);
  CHECK(error_of("[run]\npeers = 4\nduration = 9\n[churn]\ncrash = p1 at soon\n").find("test.ini:5: churn.crash") !=
        std::string::npos);
}

TEST_CASE("scenario: Poisson churn is drawn from the seed and needs a window") {
  const std::string text = "[run]\npeers = 10\nduration = 100\n[churn]\ncrash_rate = 0.05\njoin_rate = 0.1\n";
  const Scenario a = parse_scenario(text, "t", {});
  const Scenario b = parse_scenario(text, "t", {});
  const Scenario c = parse_scenario(text, "t", {"run.seed=2"});
  REQUIRE(a.churn.size() == b.churn.size());
  for (std::size_t i = 0; i < a.churn.size(); ++i) CHECK(a.churn[i].at == b.churn[i].at);
  CHECK((a.churn.size() != c.churn.size() || a.churn[0].at != c.churn[0].at));
  CHECK(a.total_ids > 10);  // the joins got ids
  CHECK(error_of("[run]\npeers = 4\n[churn]\ncrash_rate = 1\n").find("window") != std::string::npos);
}

TEST_CASE("scenario: include files, later keys override") {
  const std::string dir = std::string(RUMOR_BINARY_DIR) + "/test_sim_include";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/calib.ini") << "[compute]\nstep_time = 3ms\n[network]\nbandwidth = 2GB\n";
    std::ofstream(dir + "/main.ini") << "include = calib.ini\n[run]\npeers = 2\nduration = 1\n[compute]\nstep_time = 4ms\n";
  }
  const Scenario s = load_scenario(dir + "/main.ini", {});
  CHECK(s.classes[0].step_time == doctest::Approx(0.004));
  CHECK(s.classes[0].bandwidth == doctest::Approx(2e9));
  CHECK_THROWS_AS(load_scenario(dir + "/missing.ini", {}), ScenarioError);
}

TEST_CASE("topology: neighbour lists of the named graphs") {
  CHECK(topology_neighbours(Topology::Ring, 0, 8) == std::vector<std::uint32_t>{1, 7});
  CHECK(topology_neighbours(Topology::Hypercube, 5, 8) == std::vector<std::uint32_t>{1, 4, 7});
  CHECK(topology_neighbours(Topology::Torus, 0, 16) == std::vector<std::uint32_t>{1, 3, 4, 12});
  CHECK(topology_neighbours(Topology::Torus, 0, 1000).size() == 4);  // 25 x 40
  CHECK(topology_neighbours(Topology::Exponential, 0, 16) == std::vector<std::uint32_t>{1, 2, 4, 8, 12, 14, 15});
  CHECK(topology_neighbours(Topology::Complete, 3, 8).empty());  // "anyone"
  for (std::uint32_t i = 0; i < 12; ++i)
    for (auto j : topology_neighbours(Topology::Exponential, i, 12)) {
      const auto back = topology_neighbours(Topology::Exponential, j, 12);
      CHECK(std::find(back.begin(), back.end(), i) != back.end());  // undirected
    }
}

TEST_CASE("scenario: every loop knob is a key of its section, parsed as rumor-peer parses the flag") {
  for (const rumor::Knob& k : rumor::loop_knobs()) {
    if (!(k.scope & rumor::Knob::kSim)) continue;
    CAPTURE(k.name);
    const rumor::LoopSettings defaults;
    const std::string text = k.default_text ? "0.1" : rumor::knob_value(k, defaults);
    const std::string set = rumor::knob_key(k) + "=" + text;
    const Scenario s = parse_scenario(kBase, "test.ini", {set});
    CHECK(rumor::knob_value(k, s.loop) == (k.default_text ? "0.1" : text));
    // A bad value: the scenario's error names the place and the key, then says what the
    // table's parser says (the words rumor-peer prints for the flag).
    rumor::LoopSettings scratch;
    std::string expected;
    try {
      rumor::set_knob(k, scratch, "-7x");
    } catch (const rumor::KnobError& e) {
      expected = e.what();
    }
    if (expected.empty()) continue;  // a value that fits (none today)
    const std::string err = error_of(kBase, {rumor::knob_key(k) + "=-7x"});
    CHECK(err.find(rumor::knob_key(k)) != std::string::npos);
    CHECK(err.find(expected) != std::string::npos);
  }
  // The settings' defaults are core's (no second copy): 5 epochs when nothing else says when
  // to stop, none with a run.duration.
  CHECK(parse_scenario("[run]\npeers = 2\n", "t.ini", {}).loop.epochs == 5);
  CHECK(parse_scenario(kBase, "t.ini", {}).loop.epochs == 0);
  CHECK(parse_scenario("[run]\npeers = 2\n[workload]\nsteps = 10\n", "t.ini", {}).loop.epochs == 0);
  CHECK(parse_scenario("[run]\npeers = 2\n[output]\neval_every_steps = 20\n", "t.ini", {}).loop.eval_every == 20);
}
