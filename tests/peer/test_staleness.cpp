// Bounded staleness, local SGD and codecs on real peers over loopback (bounded in time).
#include <doctest/doctest.h>

#include <algorithm>

#include "swarm.hpp"

using namespace rumor::test;

namespace {

// n Fashion-MNIST peers on shards 1/n..n/n with the flags `common`; peer `slow` runs
// `factor` times slower (--throttle).
std::vector<std::vector<std::string>> one_slower(int n, int slow, const std::string& factor,
                                                 const std::vector<std::string>& common) {
  std::vector<std::vector<std::string>> f;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> a{"--shard", std::to_string(i + 1) + "/" + std::to_string(n)};
    a.insert(a.end(), common.begin(), common.end());
    if (i == slow) a.insert(a.end(), {"--throttle", factor});
    f.push_back(a);
  }
  return f;
}

// Four Fashion-MNIST peers for `steps` steps; peer 0 runs 5x slower.
std::vector<std::vector<std::string>> throttled(const std::string& tau, int steps) {
  return one_slower(4, 0, "5",
                    {"--steps", std::to_string(steps), "--staleness", tau, "--min-peers", "4", "--settle", "0",
                     "--exchange-timeout", "2", "--suspect-timeout", "1"});
}

double max_field(const std::vector<std::string>& lines, const char* key) {
  double m = -1e300;
  for (const auto& l : lines) m = std::max(m, field(l, key));
  return m;
}

bool have_fmnist() { return std::filesystem::exists("/usr/share/datasets/fashion-mnist"); }

// When peer i's training ended, on the wall clock (each metrics file's times count from its own
// start): its first "settled" line's time less the settling's length.
double training_ended_at(const Swarm& s, std::size_t i) {
  const auto start = metric_lines(s.metrics(i), "start");
  const auto settled = metric_lines(s.metrics(i), "settled");
  REQUIRE(!start.empty());
  REQUIRE(!settled.empty());
  return field(start[0], "unix_time") - field(start[0], "t") + field(settled[0], "t") - field(settled[0], "seconds");
}

}  // namespace

TEST_CASE("staleness: with TAU=inf the fast peers run ahead and the gap grows") {
  if (!have_fmnist()) return;
  Swarm s("tauinf", throttled("inf", 120));
  REQUIRE(s.wait_all(120));
  double gap = 0;
  for (std::size_t i = 1; i < 4; ++i) gap = std::max(gap, max_field(metric_lines(s.metrics(i), "eval"), "max_gap"));
  CHECK(gap > 30);
  CHECK(metric_lines(s.metrics(1), "wait").empty());
}

TEST_CASE("staleness: with TAU=0 the peers move in lockstep") {
  if (!have_fmnist()) return;
  Swarm s("tau0", throttled("0", 60));
  REQUIRE(s.wait_all(120));
  for (std::size_t i = 0; i < 4; ++i) {
    const auto steps = metric_lines(s.metrics(i), "step");
    REQUIRE(!steps.empty());
    CHECK(max_field(steps, "gap") <= 0);
  }
}

TEST_CASE("staleness: a throttled peer killed mid-run does not freeze the others") {
  if (!have_fmnist()) return;
  Swarm s("tau2kill", throttled("2", 100000));
  // The fast peers would follow the slow one forever; stop them by time instead. First let all
  // four load their data and train a little (loading takes seconds on a busy machine).
  const auto t0 = std::chrono::steady_clock::now();
  auto all_training = [&] {
    for (std::size_t i = 0; i < 4; ++i)
      if (metric_lines(s.metrics(i), "step").size() < 10) return false;
    return true;
  };
  while (!all_training() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(all_training());
  auto clocks = [&] {
    std::vector<double> c;
    for (std::size_t i = 1; i < 4; ++i) c.push_back(max_field(metric_lines(s.metrics(i), "step"), "clock"));
    return c;
  };
  // Their pace while bound to the slow peer...
  const auto bound0 = clocks();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto bound1 = clocks();
  s.peers[0]->signal(SIGKILL);
  // ...and once it is detected and dropped (a few seconds): they keep stepping. (How much faster
  // they go depends on what else the machine runs; bench/compression_study.sh measures rates.)
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const auto free0 = clocks();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto free1 = clocks();
  for (std::size_t i = 1; i < 4; ++i) {
    const double held = bound1[i - 1] - bound0[i - 1], free = free1[i - 1] - free0[i - 1];
    INFO("peer " << i << ": " << held << " steps in 2 s bound to the slow peer, " << free << " after it died");
    CHECK(free > 10);  // a frozen peer would make no step at all
    s.peers[i]->signal(SIGINT);
  }
  for (std::size_t i = 1; i < 4; ++i) CHECK(s.peers[i]->wait(30) == 0);
  for (std::size_t i = 1; i < 4; ++i) CHECK(!metric_lines(s.metrics(i), "dead").empty());
}

TEST_CASE("local SGD: bytes sent per epoch fall as 1/H") {
  if (!have_fmnist()) return;
  auto run = [](int H) {
    std::vector<std::vector<std::string>> f;
    for (int i = 0; i < 4; ++i)
      // Steps slowed down (throttle) so that even H=1 completes its exchange every step: the
      // bytes then depend on H alone.
      f.push_back({"--shard", std::to_string(i + 1) + "/4", "--steps", "192", "--local-steps", std::to_string(H),
                   "--min-peers", "4", "--settle", "0", "--throttle", "8"});
    Swarm s("H" + std::to_string(H), f);
    REQUIRE(s.wait_all(180));
    double bytes = 0;
    for (std::size_t i = 0; i < 4; ++i) bytes += field(s.done(i), "bytes_sent");
    return bytes;
  };
  const double b1 = run(1), b4 = run(4), b16 = run(16);
  INFO("bytes H=1 " << b1 << " H=4 " << b4 << " H=16 " << b16);
  CHECK(b1 / b4 == doctest::Approx(4.0).epsilon(0.10));
  CHECK(b4 / b16 == doctest::Approx(4.0).epsilon(0.10));
}

TEST_CASE("codecs: fp16 halves and int8 quarters the payload of every exchange") {
  auto per_exchange = [](const std::string& codec) {
    std::vector<std::vector<std::string>> f;
    for (int i = 0; i < 2; ++i)
      f.push_back({"--data", "synthetic", "--model", "mlp:128", "--shard", std::to_string(i + 1) + "/2", "--steps", "1500", "--throttle", "3",
                   "--codec", codec, "--min-peers", "2", "--settle", "0"});
    Swarm s("codec-" + codec, f);
    REQUIRE(s.wait_all(60));
    const auto ev = metric_lines(s.metrics(0), "eval");
    REQUIRE(!ev.empty());
    const double ex = field(ev.back(), "payloads_sent");
    REQUIRE(ex >= 5);
    // Every request and reply carries one payload.
    return field(ev.back(), "payload_bytes_sent") / ex;
  };
  const double n = 64 * 128 + 128 + 128 * 10 + 10;  // parameters of mlp:128 on the synthetic task
  CHECK(per_exchange("none") == doctest::Approx(4 * n));
  CHECK(per_exchange("fp16") == doctest::Approx(2 * n));
  CHECK(per_exchange("int8") == doctest::Approx(n + 4 * std::ceil(n / 256)));
  CHECK(per_exchange("topk") < 0.05 * 4 * n);
}

TEST_CASE("swarm budget: 4 peers, one 4x slower, stop together on one model (--swarm-epochs)") {
  if (!have_fmnist()) return;
  // Peer 3 runs 4x slower (--throttle 4). With --swarm-epochs 1 every peer stops when the swarm
  // has processed 60,000 samples in all: the others do more steps, it about a quarter of
  // theirs, and all stop training together, then settle onto one model.
  Swarm s("swarm-budget", one_slower(4, 3, "4", {"--swarm-epochs", "1", "--min-peers", "4", "--lr-schedule", "wsd"}));
  REQUIRE(s.wait_all(150));
  std::vector<double> ends, steps, accs;
  double samples = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    ends.push_back(training_ended_at(s, i));
    steps.push_back(field(s.done(i), "steps"));
    accs.push_back(field(s.done(i), "test_acc"));
    samples += 64 * steps.back();
    MESSAGE("p" << i << ": " << steps.back() << " steps, test_acc " << accs.back());
  }
  const auto [e0, e1] = std::minmax_element(ends.begin(), ends.end());
  const auto [a0, a1] = std::minmax_element(accs.begin(), accs.end());
  MESSAGE("training ended within " << *e1 - *e0 << " s; samples in all " << samples);
  // They finished together: no long wait for a slower one, and so no hint to share the work.
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(field(metric_lines(s.metrics(i), "settled")[0], "behind_seconds") < 5);
    CHECK(s.peers[i]->log().find("settling waited") == std::string::npos);
  }
  CHECK(*e1 - *e0 < 5);
  CHECK(*a1 - *a0 <= 0.005);
  CHECK(*a0 > 0.75);
  CHECK(samples >= 60000);
  CHECK(samples <= 60000 * 1.1);
  const double fast = (steps[0] + steps[1] + steps[2]) / 3;
  // With a budget per peer all four would take the same steps. Here the throttled one takes
  // fewer: about half of the others' on a loaded 2-core machine (127 vs 273), 0.8 when CI shares
  // the cores with more (the others are slowed by the contention, the throttled one sleeps), so
  // only "fewer" is asserted here; the next case shows the quarter where no peer waits for a
  // core (bench/HISTORY.md "A swarm-wide budget").
  CHECK(steps[3] < fast);
}

TEST_CASE("a budget per peer on machines of different speeds: the fast peer's wait for the slow one is measured, and it is told of --swarm-epochs") {
  if (!have_fmnist()) return;
  // p1 runs 10x slower. Each has its own 400 steps, so p0 finishes first and, settling, waits
  // for p1 (--settle-max) until p1 has finished too: that wait is the "settled" line's
  // behind_seconds, and p0 logs how a swarm-wide budget would share the work. p1, the last to
  // finish, waited for nobody.
  Swarm s("behind-hint", one_slower(2, 1, "10", {"--steps", "400", "--min-peers", "2", "--settle", "1", "--settle-max", "60"}));
  REQUIRE(s.wait_all(120));
  const auto fast = metric_lines(s.metrics(0), "settled"), slow = metric_lines(s.metrics(1), "settled");
  REQUIRE(fast.size() == 1);
  REQUIRE(slow.size() == 1);
  const double gap = training_ended_at(s, 1) - training_ended_at(s, 0);
  const double behind = field(fast[0], "behind_seconds");
  MESSAGE("p1 ended training " << gap << " s after p0; p0 settled " << field(fast[0], "seconds") << " s, of which "
                               << behind << " s behind");
  REQUIRE(gap > 3);
  // p0 waited for p1 until p1 had ended (its digest says so a gossip round later, hence the slack).
  CHECK(behind >= gap - 0.5);
  CHECK(behind <= gap + 3);
  CHECK(behind <= field(fast[0], "seconds"));
  CHECK(field(slow[0], "behind_seconds") < 0.5);
  CHECK(s.peers[0]->log().find("--swarm-epochs") != std::string::npos);
  CHECK(s.peers[1]->log().find("settling waited") == std::string::npos);
}

TEST_CASE("swarm budget: a machine 4x slower than the others takes about a quarter of their steps") {
  if (!have_fmnist()) return;
  // The case above cannot show the quarter on this 2-core machine: its three unthrottled peers
  // share 2 cores (about 0.55 of one each) while the throttled one, busy a quarter of the time,
  // computes on a core it finds free, so it takes 0.34-0.48 of their steps. Here every peer is a
  // machine of half a core's pace (--throttle 2; 1.6 cores asked in all, so none waits for a
  // core) and one is 4x slower than that (--throttle 8). --local-steps 4 keeps the exchanges'
  // CPU, which --throttle does not stretch, small beside the steps'. Measured 0.26-0.29 here
  // (bench/HISTORY.md "A swarm-wide budget"); the bounds leave room for a loaded machine.
  std::vector<std::vector<std::string>> f;
  for (int i = 0; i < 4; ++i)
    f.push_back({"--shard", std::to_string(i + 1) + "/4", "--swarm-epochs", "1", "--min-peers", "4", "--lr-schedule", "wsd",
                 "--local-steps", "4", "--throttle", i == 3 ? "8" : "2"});
  Swarm s("swarm-quarter", f);
  REQUIRE(s.wait_all(150));
  std::vector<double> steps;
  for (std::size_t i = 0; i < 4; ++i) steps.push_back(field(s.done(i), "steps"));
  const double fast = (steps[0] + steps[1] + steps[2]) / 3;
  MESSAGE("steps " << steps[0] << ", " << steps[1] << ", " << steps[2] << " and the slow one " << steps[3]
                   << ": ratio " << steps[3] / fast);
  CHECK(steps[3] / fast > 0.12);
  CHECK(steps[3] / fast < 0.45);
}
