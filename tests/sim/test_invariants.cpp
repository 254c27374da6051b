// The simulator as a stepping fixture, in the spirit of raft's: Simulation::step() fires one
// event, and after EVERY event the invariant checker (sim/invariants.hpp, which every campaign
// run uses too) checks the protocol's properties on the whole swarm, among them:
//  - mixing conserves the sum of the parameters (training off, i.e. lr 0; uniform weights):
//    the live parameters plus what initiators still owe for exchanges their responder already
//    mixed (the accept, or the reply carrying y_s, still on its way or queued);
//  - no mix across clocks more than TAU apart (the snapshot clocks of every request and reply);
//  - a peer's clock never decreases, and once it knows every member it never starts a step
//    more than TAU past the slowest of them;
//  - no peer has two open exchanges with the same partner.
#include <doctest/doctest.h>

#include <string>

#include "sim/invariants.hpp"
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

}  // namespace

TEST_CASE("invariants: after every event, mixing conserves the sum, clocks respect TAU and never decrease") {
  // The checker every campaign run uses (sim/invariants.hpp), on this one scenario; TAU and the
  // bounds come from the scenario.
  Simulation sim(scn(kAveraging));
  sim.check_invariants();
  const InvariantChecker& c = *sim.invariants();
  CHECK(c.conservation_on());
  while (sim.step()) {
  }
  const std::string why = "first broken: " + (c.first() ? c.first()->line() : std::string("none"));
  INFO(why);
  CHECK(c.ok());
  CHECK(c.counts().events > 5000);
  CHECK(c.counts().conservation > 5000);
  CHECK(c.counts().tau_mix > 500);       // the checks above saw plenty of exchanges
  CHECK(c.counts().half_applied > 0);    // ... some caught between the responder's mix and the initiator's
  CHECK(c.counts().tau_step > 1000);     // the staleness bound was checked at most steps
  for (std::uint32_t i = 0; i < sim.ids(); ++i) CHECK(sim.steps(i) == 150);
}

TEST_CASE("invariants: [invariants] check = on turns the checker on, and its result is in summary.json") {
  Simulation sim(scn(kAveraging, {"invariants.check=on", "workload.steps=30"}));
  REQUIRE(sim.invariants());
  sim.run();
  CHECK(sim.invariants()->ok());
  CHECK(sim.summary_json().find("\"invariants\"") != std::string::npos);
  Simulation off(scn(kAveraging, {"workload.steps=30"}));
  CHECK(!off.invariants());
  off.run();
  CHECK(off.summary_json().find("\"invariants\"") == std::string::npos);
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
