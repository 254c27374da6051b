// The testbed's side of the simulator (docs/testbed.md): the scenario keys it added (`cpu`,
// `bandwidth_change`, `network.limit_receive`), the network model's time-varying and
// receive-limited rates, and that examples/testbed/S0..S5.ini are scenarios the simulator
// accepts and that describe the six testbed networks.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/rng.hpp"
#include "sim/network.hpp"
#include "sim/peer_flags.hpp"
#include "sim/scenario.hpp"

using namespace rumor::sim;

namespace {
const char* kTwo = "[run]\npeers = 2\nduration = 10\n";
}

TEST_CASE("testbed keys: a class's cpu share stretches what it computes, bandwidth_change parses") {
  const Scenario s = parse_scenario(std::string(kTwo) +
                                        "[compute]\nstep_time = 2ms\nexchange_cpu = 1ms\neval_time = 0.1\nstart = 1\n"
                                        "[class.fast]\ncount = 1\n"
                                        "[class.slow]\ncount = 1\ncpu = 0.25\nbandwidth = 1Gbit\n"
                                        "bandwidth_change = 20Mbit@10s, 5MB@1min\n",
                                    "t.ini", {});
  CHECK(s.classes[0].cpu == 1.0);
  CHECK(s.classes[0].step_time == doctest::Approx(0.002));
  CHECK(s.classes[1].cpu == 0.25);
  CHECK(s.classes[1].step_time == doctest::Approx(0.008));
  CHECK(s.classes[1].exchange_cpu == doctest::Approx(0.004));
  CHECK(s.classes[1].eval_time == doctest::Approx(0.4));
  CHECK(s.classes[1].start == doctest::Approx(4));
  REQUIRE(s.classes[1].bandwidth_changes.size() == 2);
  CHECK(s.classes[1].bandwidth_changes[0].at == 10);
  CHECK(s.classes[1].bandwidth_changes[0].bandwidth == doctest::Approx(2.5e6));
  CHECK(s.classes[1].bandwidth_changes[1].at == 60);
  CHECK(s.classes[1].bandwidth_at(9.99) == doctest::Approx(1.25e8));
  CHECK(s.classes[1].bandwidth_at(10) == doctest::Approx(2.5e6));
  CHECK(s.classes[1].bandwidth_at(61) == doctest::Approx(5e6));
  CHECK_FALSE(s.limit_receive);
  // compute.cpu is every class's default
  CHECK(parse_scenario(std::string(kTwo) + "[compute]\ncpu = 0.5\nstep_time = 1ms\n", "t.ini", {}).classes[0].step_time ==
        doctest::Approx(0.002));

  const auto error = [](const std::string& text) {
    try {
      parse_scenario(std::string(kTwo) + text, "t.ini", {});
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("[class.a]\ncount = 2\ncpu = 0\n").find("class.a.cpu") != std::string::npos);
  CHECK(error("[class.a]\ncount = 2\nbandwidth_change = 20Mbit\n").find("RATE@T") != std::string::npos);
  CHECK(error("[class.a]\ncount = 2\nbandwidth_change = 1MB@5, 2MB@4\n").find("increase") != std::string::npos);
  CHECK(error("[class.a]\ncount = 2\nbandwidth_change = 0MB@5\n").find("> 0") != std::string::npos);
}

TEST_CASE("network: a rate change mid-message, and limit_receive's slower end and one message at a time") {
  // p0 on 8 MB/s dropping to 1 MB/s at t = 1; p1 and p2 at 100 MB/s.
  const std::string classes =
      "[run]\npeers = 3\nduration = 10\n[network]\nlatency = 0\n"
      "[class.a]\ncount = 1\nbandwidth = 8MB\nbandwidth_change = 1MB@1\n[class.b]\ncount = 2\nbandwidth = 100MB\n";
  {
    const Scenario s = parse_scenario(classes, "t.ini", {});
    Network net(s, {0, 1, 1}, rumor::Rng(1));
    // 12 MB from p0 at t = 0: 8 MB in the first second, the other 4 MB at 1 MB/s.
    CHECK(net.transmit(0, 1, 12'000'000, 0) == doctest::Approx(5.0));
    // Sent after the change: 1 MB/s throughout.
    CHECK(net.transmit(0, 2, 1'000'000, 6) == doctest::Approx(7.0));
    // Without limit_receive, p1 sends to p0 at p1's own rate.
    CHECK(net.transmit(1, 0, 1'000'000, 6) == doctest::Approx(6.01));
  }
  {
    const Scenario s = parse_scenario(classes + "[network]\nlimit_receive = on\n", "t.ini", {});
    CHECK(s.limit_receive);
    Network net(s, {0, 1, 1}, rumor::Rng(1));
    // p1 -> p0 at p0's rate (1 MB/s after t = 1); then p2 -> p0 waits for p0 to be free.
    CHECK(net.transmit(1, 0, 1'000'000, 6) == doctest::Approx(7.0));
    CHECK(net.transmit(2, 0, 1'000'000, 6) == doctest::Approx(8.0));
    // p1's NIC is not held while p0 receives: its next message, to p2, goes at once.
    CHECK(net.transmit(1, 2, 1'000'000, 6) == doctest::Approx(6.02));
    // Before the change p0 receives at 8 MB/s, and the change mid-message applies at the receiver too.
    Network fresh(s, {0, 1, 1}, rumor::Rng(1));
    CHECK(fresh.transmit(1, 0, 12'000'000, 0) == doctest::Approx(5.0));
  }
}

TEST_CASE("testbed scenarios: S0..S5 load, and their plans carry the classes' bandwidth, cpu and changes") {
  const std::string dir = std::string(RUMOR_SOURCE_DIR) + "/examples/testbed/";
  struct Want {
    const char* file;
    double slow_bw, slow_cpu;  // the last peer's
    std::size_t changes;
  };
  const Want wants[] = {{"S0.ini", 1.25e8, 0.3, 0},  {"S1.ini", 1.25e7, 0.3, 0},   {"S2.ini", 1.25e8, 0.075, 0},
                        {"S3.ini", 1.25e7, 0.075, 0}, {"S4.ini", 1.25e6, 0.3, 0}, {"S5.ini", 1.25e8, 0.3, 1}};
  for (const Want& w : wants) {
    CAPTURE(w.file);
    const Scenario s = load_scenario(dir + w.file, {});
    CHECK(s.founders == 4);
    CHECK(s.limit_receive);
    const auto plan = nlohmann::json::parse(testbed_plan(s));
    REQUIRE(plan["peers"].size() == 4);
    const auto& last = plan["peers"][3];
    CHECK(last["bandwidth"].get<double>() == doctest::Approx(w.slow_bw));
    CHECK(last["cpu"].get<double>() == doctest::Approx(w.slow_cpu));
    CHECK(last["bandwidth_changes"].size() == w.changes);
    CHECK(plan["peers"][0]["cpu"].get<double>() == doctest::Approx(0.3));
    CHECK(plan["peers"][0]["flags"].size() > 10);
    if (w.changes) {
      CHECK(last["bandwidth_changes"][0]["at"].get<double>() == doctest::Approx(9));
      CHECK(last["bandwidth_changes"][0]["bandwidth"].get<double>() == doctest::Approx(2.5e6));
    }
  }
  // What the testbed cannot build is refused by name.
  std::string refused;
  try {
    (void)testbed_plan(parse_scenario("[run]\npeers = 2\n[network]\nloss = 0.1\n", "t.ini", {}));
  } catch (const ScenarioError& e) {
    refused = e.what();
  }
  CHECK(refused.find("network.loss") != std::string::npos);
}
