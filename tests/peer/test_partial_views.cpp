// Partial views (HyParView, core/overlay.hpp) on real processes: 64 rumor-peer processes on
// loopback join through one member with active views of 6, train and finish with every view
// bounded; three SIGKILLed peers are repaired around, and a late joiner gets the model.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "swarm.hpp"

using namespace rumor::test;

// About 30 s on 2 cores (the 64 processes are training 3-4 s after launch: the CUDA backend
// is a plugin that CPU peers never load); bench/partial_views_64.sh runs it alone.
TEST_CASE("partial views: 64 peers with views of 6 join through one member, repair around 3 SIGKILLs, and a joiner gets the model") {
  constexpr int kPeers = 64;
  constexpr std::size_t kActive = 6, kPassive = 36;
  const std::set<int> killed{11, 29, 47};
  const auto flags = [&](int i) {
    // Synthetic data and logistic regression, one thread each; --throttle stretches each step
    // (sleeping, messages handled meanwhile) so 64 processes fit on 2 cores.
    return std::vector<std::string>{"--data", "synthetic", "--model", "logreg", "--threads", "1", "--shard",
                                    std::to_string(i + 1) + "/" + std::to_string(kPeers), "--view", "partial",
                                    "--active-view", std::to_string(kActive), "--passive-view", std::to_string(kPassive),
                                    "--duration", "300", "--throttle", "1000", "--local-steps", "4", "--eval-every", "100",
                                    "--settle", "0", "--probe-interval", "0.3", "--suspect-timeout", "1.5",
                                    "--exchange-timeout", "2"};
  };
  std::vector<std::vector<std::string>> f;
  for (int i = 0; i < kPeers; ++i) f.push_back(flags(i));
  Swarm s("partial64", f);
  // Every peer started training (its first evaluation, after its state transfer). Starting 64
  // processes on 2 cores takes a while; each trains until it is stopped below.
  const double started = wait_until(
      [&] {
        for (int i = 0; i < kPeers; ++i)
          if (metric_lines(s.metrics(i), "eval").empty()) return false;
        return true;
      },
      150);
  REQUIRE(started >= 0);
  MESSAGE("64 peers training after " << started << " s");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::vector<std::size_t> log_at_kill(kPeers);
  for (int i = 0; i < kPeers; ++i) log_at_kill[i] = s.peers[i]->log().size();
  for (int k : killed) s.peers[k]->signal(SIGKILL);
  // Each killed peer is noticed by survivors that held it: suspected, then found dead (metrics),
  // or found unreachable by the transport and dropped from the active view at once (the log's
  // "net: ADDR is unreachable"; a member handled that way never becomes suspect, and in one
  // full ctest run of 325 a killed peer was noticed only so).
  const auto noticed = [&] {
    std::set<std::string> seen;
    for (int i = 0; i < kPeers; ++i) {
      if (killed.count(i)) continue;
      for (const char* ev : {"suspect", "dead"})
        for (const auto& l : metric_lines(s.metrics(i), ev)) {
          const auto p = l.find("\"peer\":\"");
          if (p != std::string::npos) seen.insert(l.substr(p + 8, l.find('"', p + 8) - p - 8));
        }
      const std::string log = s.peers[i]->log();
      for (int k : killed)
        if (log.find("net: " + s.peers[k]->listen_address() + " is unreachable", log_at_kill[i]) != std::string::npos)
          seen.insert(s.peers[k]->listen_address());
    }
    return seen;
  };
  const double detected = wait_until(
      [&] {
        const auto seen = noticed();
        return std::all_of(killed.begin(), killed.end(), [&](int k) { return seen.count(s.peers[k]->listen_address()) == 1; });
      },
      30);
  CHECK(detected >= 0);
  MESSAGE("the 3 killed peers were noticed within " << detected << " s");
  // The joiner comes once every survivor has evaluated step 200 or later, so that the model it
  // takes is the swarm's trained one and its step is the swarm's. (A fixed wait was a machine's
  // speed: on 2026-12-07 afternoon the swarm was short of step 100 when the joiner came, with
  // this test's code of days before too, and the joiner rightly took a step-44 model.)
  const auto last_step = [&](int i) {
    const auto evals = metric_lines(s.metrics(i), "eval");
    return evals.empty() ? 0.0 : field(evals.back(), "step");
  };
  const double trained = wait_until(
      [&] {
        for (int i = 0; i < kPeers; ++i)
          if (!killed.count(i) && last_step(i) < 200) return false;
        return true;
      },
      90);
  REQUIRE(trained >= 0);
  MESSAGE("every survivor past step 200 " << trained << " s after the kills were noticed");
  std::vector<std::size_t> evals_then(kPeers);
  std::vector<double> acc_then;  // the survivors' last evaluations before the joiner starts
  for (int i = 0; i < kPeers; ++i) {
    const auto evals = metric_lines(s.metrics(i), "eval");
    evals_then[i] = evals.size();
    if (!killed.count(i) && !evals.empty()) acc_then.push_back(field(evals.back(), "test_acc"));
  }
  std::sort(acc_then.begin(), acc_then.end());
  // A late joiner, through a member that is not the first; it trains for 6 s.
  const auto jm = s.dir / "joiner.jsonl";
  std::vector<std::string> ja = flags(*killed.begin());  // a killed peer's shard
  ja[std::find(ja.begin(), ja.end(), "--duration") - ja.begin() + 1] = "6";
  ja.insert(ja.end(), {"--join", s.peers[5]->listen_address(), "--metrics", jm.string(), "--name", "joiner"});
  Process joiner(ja, s.dir / "joiner.log");
  {
    INFO("joiner log:\n" << joiner.log());
    REQUIRE(joiner.wait(90) == 0);
  }
  // Two more evaluations on every survivor (the views have had time to repair), then the
  // survivors leave gracefully (SIGTERM) and exit 0.
  REQUIRE(wait_until(
              [&] {
                for (int i = 0; i < kPeers; ++i)
                  if (!killed.count(i) && metric_lines(s.metrics(i), "eval").size() < evals_then[i] + 2) return false;
                return true;
              },
              60) >= 0);
  std::vector<std::string> before_stop(kPeers);
  for (int i = 0; i < kPeers; ++i)
    if (!killed.count(i)) before_stop[i] = metric_lines(s.metrics(i), "eval").back();
  for (int i = 0; i < kPeers; ++i)
    if (!killed.count(i)) s.peers[i]->signal(SIGTERM);
  for (int i = 0; i < kPeers; ++i)
    if (!killed.count(i)) {
      INFO("peer " << i << " log:\n" << s.peers[i]->log());
      REQUIRE(s.peers[i]->wait(60) == 0);
    }

  // Every view stayed bounded, on every evaluation of every peer, and training happened.
  std::size_t max_members = 0, max_active = 0, max_passive = 0;
  double worst_final = 1;
  int repaired = 0;
  for (int i = 0; i < kPeers; ++i) {
    if (killed.count(i)) continue;
    const auto evals = metric_lines(s.metrics(i), "eval");
    REQUIRE(evals.size() >= 2);
    for (const auto& l : evals) {
      max_members = std::max(max_members, static_cast<std::size_t>(field(l, "peers")));
      max_active = std::max(max_active, static_cast<std::size_t>(field(l, "view_active")));
      max_passive = std::max(max_passive, static_cast<std::size_t>(field(l, "view_passive")));
    }
    // Repaired: the active view is full again before the stop, although three members died
    // (a link may be in the making: one short of full is allowed). A member whose candidates
    // all have full views can be declined (HyParView's low-priority Neighbor) and stay a link
    // or two short for a while: a clean CI run saw 3 and 4 of 6 on two peers of 61. So every
    // peer keeps at least half its view, and nearly all are full again.
    INFO("peer " << i << " last eval before the stop: " << before_stop[i]);
    const auto active = static_cast<std::size_t>(field(before_stop[i], "view_active"));
    CHECK(active >= kActive / 2);
    repaired += active >= kActive - 1;
    worst_final = std::min(worst_final, field(s.done(i), "test_acc"));
  }
  CHECK(repaired >= kPeers - static_cast<int>(killed.size()) - 3);
  MESSAGE("members held at most " << max_members << ", active " << max_active << ", passive " << max_passive
                                  << "; worst final accuracy " << worst_final);
  CHECK(max_active <= kActive);
  CHECK(max_passive <= kPassive);
  // The views, plus a few members in exchanges, probes or transfers at that moment, and
  // ourselves (45 and 49 measured).
  CHECK(max_members <= kActive + kPassive + 12);
  CHECK(worst_final > 0.5);                             // a random model reads about 0.1

  // The joiner took the swarm's model and step from a member.
  REQUIRE(metric_lines(jm, "state_received").size() == 1);
  const auto je = metric_lines(jm, "eval");
  REQUIRE(!je.empty());
  CHECK(field(je.front(), "step") >= 200);
  // Its first evaluation is of the swarm's model: about as good as the members' last ones before
  // it started (they train on meanwhile), and twice a random model's 0.1. (An absolute 0.5 held
  // while the swarm was past 0.7 by then. On 2026-12-07 this VM failed it with the code of
  // days before too: the joiner's first was 0.41-0.48, the members' last 0.16-0.36.)
  REQUIRE(!acc_then.empty());
  const double median_then = acc_then[acc_then.size() / 2];
  INFO("joiner's first accuracy " << field(je.front(), "test_acc") << "; the survivors' when it started: " << acc_then.front()
                                  << " to " << acc_then.back() << ", median " << median_then);
  CHECK(field(je.front(), "test_acc") > 0.2);
  CHECK(field(je.front(), "test_acc") >= median_then - 0.05);
  CHECK(field(je.back(), "view_active") <= kActive);
}
