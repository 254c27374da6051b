// Fault campaigns (sim/campaign.hpp, docs/testing.md): the campaign must be able to fail (each
// test-only mutation is found within a stated number of seeds), a clean campaign runs clean,
// a seed replays exactly, and every protocol bug a campaign found stays fixed: each regression
// test below reruns the seed that found it, under the checker.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/campaign.hpp"
#include "sim/invariants.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor;
using namespace rumor::sim;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A campaign from seed 1 that stops at its first failing seed.
CampaignResult find(const std::string& mutation, std::uint64_t max_seeds) {
  CampaignOptions o;
  o.runs = max_seeds;
  o.seed = 1;
  o.jobs = 1;  // the first failing seed in seed order
  o.stop_at_first = true;
  o.mutation = mutation;
  return run_campaign(o);
}

// The regression runs: the seed's scenario, under the checker, clean.
void replays_clean(std::uint64_t seed) {
  const CampaignRun r = run_campaign_seed(seed);
  INFO(r.line());
  CHECK(r.error.empty());
  CHECK(!r.first.has_value());
  CHECK(r.events > 0);
}

}  // namespace

// ---------------------------------------------------------------- mutations: the campaign can fail

TEST_CASE("campaign: mutation skip_overlap (the staleness rule ignored) is found at seed 3 of at most 200") {
  const auto r = find("skip_overlap", 200);
  REQUIRE(r.failures == 1);
  INFO(r.failed.front().line());
  CHECK(r.failed.front().seed == 3);
  REQUIRE(r.failed.front().first);
  CHECK((r.failed.front().first->name == "tau_step" || r.failed.front().first->name == "tau_mix"));
}

TEST_CASE("campaign: mutation mix_nonfinite (a NaN mixed in) is found at seed 1 of at most 200") {
  const auto r = find("mix_nonfinite", 200);
  REQUIRE(r.failures == 1);
  INFO(r.failed.front().line());
  CHECK(r.failed.front().seed == 1);
  REQUIRE(r.failed.front().first);
  CHECK(r.failed.front().first->name == "finite");
}

TEST_CASE("campaign: mutation keep_dead (a dead member never removed) is found at seed 44 of at most 200") {
  const auto r = find("keep_dead", 200);
  REQUIRE(r.failures == 1);
  INFO(r.failed.front().line());
  CHECK(r.failed.front().seed == 44);
  REQUIRE(r.failed.front().first);
  CHECK(r.failed.front().first->name == "detection");
}

TEST_CASE("campaign: mutation endless_wait (a staleness wait that never ends) is found at seed 3 of at most 200") {
  const auto r = find("endless_wait", 200);
  REQUIRE(r.failures == 1);
  INFO(r.failed.front().line());
  CHECK(r.failed.front().seed == 3);
  REQUIRE(r.failed.front().first);
  CHECK(r.failed.front().first->name == "liveness");
}

// ---------------------------------------------------------------- a clean campaign

TEST_CASE("campaign: 500 seeds run clean, the faults fire, and int4, fragments and outer momentum are drawn") {
  // The CI campaign of issue 29 (docs/testing.md): 500 seeds, about 100 s of CPU.
  CampaignOptions o;
  o.runs = 500;
  o.seed = 1;
  o.jobs = 2;
  std::string failures;
  o.on_failure = [&](const CampaignRun& r) { failures += r.line() + "\n"; };
  const auto r = run_campaign(o);
  INFO(failures);
  CHECK(r.runs == 500);
  CHECK(r.failures == 0);
  CHECK(r.events > 100000);
  for (std::size_t k = 0; k < kFaultPoints; ++k) {
    INFO(std::string(fault_name(static_cast<FaultPoint>(k))));
    CHECK(r.faults[k] > 0);
  }
  // Among them, runs with the 4-bit codec, with fragments, with outer momentum, and with
  // fragments and int4 at once (issue 32's knobs under faults).
  int int4 = 0, fragments = 0, outer = 0, both = 0;
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    const std::string t = campaign_scenario(seed);
    const bool i4 = t.find("codec = int4\n") != std::string::npos, fr = t.find("fragments = ") != std::string::npos;
    int4 += i4;
    fragments += fr;
    both += i4 && fr;
    outer += t.find("outer_momentum = ") != std::string::npos;
  }
  INFO("int4 " << int4 << ", fragments " << fragments << ", outer momentum " << outer << ", int4 with fragments " << both);
  CHECK(int4 >= 20);
  CHECK(fragments >= 40);
  CHECK(outer >= 30);
  CHECK(both >= 3);
}

// ---------------------------------------------------------------- replay

TEST_CASE("campaign: a seed's scenario is a pure function of the seed, and --replay reruns it exactly") {
  CHECK(campaign_scenario(7) == campaign_scenario(7));
  CHECK(campaign_scenario(7) != campaign_scenario(8));
  const auto dir = std::filesystem::temp_directory_path() / "rumor_test_campaign_replay";
  std::filesystem::remove_all(dir);
  const CampaignRun a = run_campaign_seed(7, "", (dir / "a").string());
  const CampaignRun b = run_campaign_seed(7, "", (dir / "b").string());
  CHECK(a.events == b.events);
  CHECK(slurp((dir / "a/events.csv").string()) == slurp((dir / "b/events.csv").string()));
  CHECK(slurp((dir / "a/summary.json").string()) == slurp((dir / "b/summary.json").string()));
  // The INI it wrote is a normal scenario: run as one, the same run.
  const Scenario s = load_scenario((dir / "a/scenario.ini").string(), {});
  Simulation sim(s);
  REQUIRE(sim.invariants());
  sim.run();
  CHECK(sim.events_csv() == slurp((dir / "a/events.csv").string()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("campaign: [faults] keys are checked like every other section's") {
  const std::string base = "[run]\npeers = 2\n[workload]\nkind = quadratic\ntraining = off\nsteps = 5\n";
  CHECK_THROWS_WITH_AS(parse_scenario(base + "[faults]\ndrop = 2\n", "t.ini", {}), doctest::Contains("faults.drop"), ScenarioError);
  CHECK_THROWS_WITH_AS(parse_scenario(base + "[faults]\nmutation = nope\n", "t.ini", {}), doctest::Contains("faults.mutation"),
                       ScenarioError);
  CHECK_THROWS_WITH_AS(parse_scenario(base + "[faults]\nfloods = 0.1\n", "t.ini", {}), doctest::Contains("floods"), ScenarioError);
  const Scenario s = parse_scenario(base + "[faults]\ndrop = 0.1\npartition = 0.5\nstall_max = 200ms\n", "t.ini", {});
  CHECK(s.faults[FaultPoint::Drop] == doctest::Approx(0.1));
  CHECK(s.faults[FaultPoint::Partition] == doctest::Approx(0.5));
  CHECK(s.faults.stall_max == doctest::Approx(0.2));
  CHECK(s.faults[FaultPoint::Corrupt] == 0);
}

TEST_CASE("campaign: every fault point fires, deterministically, and is counted in summary.json") {
  const std::string text = R"(
[run]
peers = 12
seed = 4
settle = 0.2
[workload]
kind = quadratic
training = off
dim = 8
steps = 150
[compute]
step_time = 10ms
[network]
latency = 3ms
[gossip]
bootstrap = seed
probe_interval = 0.2
suspect_timeout = 0.5
[churn]
leave = random at 0.5
leave = random at 0.9
join = 2 at 0.7
[faults]
drop = 0.02
delay = 0.02
duplicate = 0.02
reorder = 0.02
truncate = 0.01
corrupt = 0.05
connect_fail = 0.02
stall = 0.01
crash_mid_exchange = 0.002
crash_mid_transfer = 0.5
crash_mid_leave = 0.5
restart = 1
partition = 1
slow = 0.3
clock_skew = 0.3
[invariants]
check = on
)";
  Simulation a(parse_scenario(text, "all.ini", {}));
  a.run();
  Simulation b(parse_scenario(text, "all.ini", {}));
  b.run();
  CHECK(a.events_csv() == b.events_csv());
  CHECK(a.summary_json() == b.summary_json());
  for (std::size_t k = 0; k < kFaultPoints; ++k) {
    INFO(std::string(fault_name(static_cast<FaultPoint>(k))));
    CHECK(a.fault_counts()[k] > 0);
  }
  CHECK(a.summary_json().find("\"crash_mid_exchange\"") != std::string::npos);
  INFO((a.invariants()->first() ? a.invariants()->first()->line() : std::string()));
  CHECK(a.invariants()->ok());
}

// ---------------------------------------------------------------- regressions (the seed that found each bug)
namespace {

// A saved scenario (tests/sim/campaign_seeds/), run to its end under the checker.
void saved_runs_clean(const std::string& file, bool force_conservation = false) {
  const Scenario s = load_scenario(std::string(RUMOR_SOURCE_DIR) + "/tests/sim/campaign_seeds/" + file, {});
  Simulation sim(s);
  REQUIRE(sim.invariants());
  if (force_conservation) sim.invariants()->force_conservation();
  while (sim.now() <= sim.invariants()->run_bound() && sim.step()) {
  }
  const std::string why = file + ": " + (sim.invariants()->first() ? sim.invariants()->first()->line() : std::string("clean"));
  INFO(why);
  CHECK(sim.invariants()->ok());
  CHECK(sim.finished());
}

const char* kDuplicates = R"(
[run]
peers = 8
seed = 3
settle = 0
[workload]
kind = quadratic
training = off
dim = 16
init_mean = 1
init_sd = 1
steps = 100
[compute]
step_time = 10ms
dist = exponential
[network]
latency = 5ms
[gossip]
bootstrap = all
staleness = 2
[faults]
duplicate = 0.1
[invariants]
check = on
)";

const char* kFinal = R"(
[run]
peers = 6
seed = 1
settle = 0
[workload]
kind = quadratic
training = off
dim = 8
init_mean = 1
steps = 40
[compute]
step_time = 10ms
dist = exponential
[network]
latency = 30ms
[gossip]
bootstrap = all
max_in_flight = 2
[invariants]
check = on
)";

const char* kPartitions = R"(
[run]
peers = 6
seed = 5
settle = 0
[workload]
kind = quadratic
training = off
dim = 8
steps = 8000
[compute]
step_time = 10ms
[network]
latency = 2ms
[gossip]
bootstrap = all
suspect_timeout = 1
[faults]
partition = 0.05
partition_max = 8
[invariants]
check = on
)";

void runs_clean(const std::string& text, const std::vector<std::string>& sets = {}) {
  Simulation sim(parse_scenario(text, "regression.ini", sets));
  REQUIRE(sim.invariants());
  while (sim.now() <= sim.invariants()->run_bound() && sim.step()) {
  }
  INFO((sim.invariants()->first() ? sim.invariants()->first()->line() : std::string("clean")));
  CHECK(sim.invariants()->ok());
  CHECK(sim.finished());
}

}  // namespace

// (a) A duplicated exchange request was answered (and mixed) twice, and a duplicated reply
// chunk failed the exchange after the responder had mixed: the sum moved (conservation at
// 0.11 s with run.seed 3; found by faults.duplicate before campaigns ran).
TEST_CASE("campaign regression: a duplicated exchange message is not mixed twice (run.seed 3, faults.duplicate)") {
  runs_clean(kDuplicates);
  runs_clean(kDuplicates, {"gossip.stream_exchanges=off"});
  runs_clean(kDuplicates, {"run.seed=4", "gossip.max_in_flight=1"});
}

// (b) A peer restarted from its checkpoint told clock 0 until its first step (clock invariant:
// "it tells clock 0 (its model is at 5)"), campaign seed 17 of the first draw.
TEST_CASE("campaign regression: a restart from a checkpoint tells its checkpoint's clock (seed 17, first draw)") {
  saved_runs_clean("draw1_seed17_restart_clock.ini");
}

// With training off, a joiner's adopted step did not move its tick clock: it told the
// swarm's step, then went back (campaign seed 16 of the first draw).
TEST_CASE("campaign regression: training off, an adopted step is the tick clock (seed 16, first draw)") {
  saved_runs_clean("draw1_seed16_adopted_tick.ini");
}

// (c) The loop's Final exited with exchanges it had started still open: the responder's half
// was lost (conservation at the first `done`, run.seed 1..3 of this scenario; campaign seed
// 289 of the second draw).
TEST_CASE("campaign regression: Final waits for the exchanges it started (run.seed 1..3)") {
  for (const char* seed : {"run.seed=1", "run.seed=2", "run.seed=3"}) runs_clean(kFinal, {seed});
}

// News that a partner left gave up an exchange whose accept was still on its way: the half the
// leaver had mixed was lost (conservation, campaign seed 93 of the third draw, with delay and
// reorder faults). Now only the leaver's own Leave gives an exchange up; under delay and
// reorder even that can overtake the accept (docs/testing.md, "Known limits"), so the run is
// checked with conservation forced on only with those two faults off.
TEST_CASE("campaign regression: news of a leave does not give up an answered exchange (seed 93, third draw)") {
  saved_runs_clean("draw3_seed93_left_news.ini");
  const Scenario s = load_scenario(std::string(RUMOR_SOURCE_DIR) + "/tests/sim/campaign_seeds/draw3_seed93_left_news.ini",
                                   {"faults.delay=0", "faults.reorder=0"});
  Simulation sim(s);
  sim.invariants()->force_conservation();
  sim.run();
  CHECK(sim.invariants()->ok());
}

// (d) A new probe replaced the probe in progress before its indirect phase ended, so probes
// never suspected anyone: 7 s of partition without one suspicion (this scenario, run.seed 5).
// (e) Two sides that declared each other dead during a partition never spoke again after it
// healed: split brain (heal invariant at 78.8 s, run.seed 5; campaign seed 1022).
TEST_CASE("campaign regression: probes suspect, and healed partitions join up again (run.seed 5, seeds 1022 and 1395)") {
  Simulation sim(parse_scenario(kPartitions, "partitions.ini", {}));
  sim.run();
  CHECK(sim.invariants()->ok());
  CHECK(sim.invariants()->counts().heal >= 1);
  CHECK(sim.events_csv().find("view_suspect") != std::string::npos);
  CHECK(sim.events_csv().find("view_dead") != std::string::npos);
  replays_clean(1022);
  // A partition while the swarm formed: each half joined through the seeds it reached.
  replays_clean(1395);
}

// A joiner whose seed had crashed was never "joined", so it never probed: a crashed member
// stayed alive in its view for ever (detection, campaign seed 1262).
TEST_CASE("campaign regression: a peer probes its members before its join is answered (seed 1262)") {
  replays_clean(1262);
}

// A refused connect reached a peer before the reply or accept its partner had sent just before
// it exited, and the initiator gave the exchange up: the half the partner applied was lost
// (conservation, campaign seeds 150 and 391). The simulator's network now refuses no earlier
// than the last message over that link arrives, as one TCP connection per pair does (the
// partner's data comes before its reset; docs/wire.md).
TEST_CASE("campaign regression: a refusal does not overtake what the dead peer sent before (seeds 150 and 391)") {
  replays_clean(150);
  replays_clean(391);
}

// A suspicion learnt from another member's digest set no check of our own, so the member stayed
// Suspect for ever in a quiet view: a crashed peer never left it (detection, campaign seed 252).
TEST_CASE("campaign regression: a suspicion learnt from a digest expires into dead (seed 252)") {
  replays_clean(252);
}
