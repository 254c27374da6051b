// Joining with a deadline (GossipConfig::join_timeout_s) in the in-memory cluster: peers that
// start in any order keep retrying until the deadline; a peer nobody answers fails with the
// seeds and their last errors; a founder (in its own seed list) starts the swarm instead.
#include <doctest/doctest.h>

#include "cluster.hpp"

using namespace rumor;
using namespace rumor::testing;

TEST_CASE("join: a seed that comes up late is joined before the deadline (peers start in any order)") {
  Cluster c;
  c.cfg.join_timeout_s = 10;
  Node& b = c.add("b", random_params(3, 1), {"a"}, 1);  // "a" is not up yet: sends to it are refused
  c.run(4.0);
  CHECK(b.g->joining());
  CHECK(!b.g->joined());
  CHECK(!b.g->join_failed());
  c.add("a", random_params(3, 2), {}, 2);  // the seed starts, 4 s late
  c.run(6.0);
  CHECK(b.g->joined());
  CHECK(!b.g->joining());
  c.run(20.0);  // well past the deadline: nothing changes
  CHECK(!b.g->join_failed());
  CHECK(b.g->view().live_count() == 1);
  CHECK(c.nodes["a"]->g->view().live_count() == 1);
}

TEST_CASE("join: nobody answering within the deadline fails, names the seeds and errors, and stops retrying") {
  Cluster c;
  c.cfg.join_timeout_s = 5;
  Node& p = c.add("p", random_params(3, 1), {"dead1", "dead2"}, 1);
  c.run(4.9);
  CHECK(p.g->joining());
  CHECK(!p.g->join_failed());
  c.run(5.05);
  CHECK(p.g->join_failed());
  CHECK(!p.g->joining());
  CHECK(!p.g->founded());
  const std::string why = p.g->join_failure();
  INFO(why);
  CHECK(why.find("could not join through dead1,dead2 within 5 s") == 0);
  CHECK(why.find("dead1: connection refused") != std::string::npos);
  CHECK(why.find("dead2: connection refused") != std::string::npos);
  // Retrying stopped: a seed that starts now never hears from the failed peer.
  c.add("dead1", random_params(3, 2), {}, 2);
  c.run(15.0);
  CHECK(c.nodes["dead1"]->g->view().members().empty());
  CHECK(!p.g->joined());
}

TEST_CASE("join: a seed that never answers (no error either) is reported as 'no answer'") {
  Cluster c;
  c.cfg.join_timeout_s = 3;
  c.add("mute", random_params(3, 2), {}, 2);
  c.cut.insert({"mute", "p"});  // p's requests arrive, the replies are lost
  Node& p = c.add("p", random_params(3, 1), {"mute"}, 1);
  c.run(3.5);
  REQUIRE(p.g->join_failed());
  CHECK(p.g->join_failure() == "could not join through mute within 3 s: mute: no answer");
}

TEST_CASE("join: without a deadline (the default) a peer retries for ever") {
  Cluster c;
  CHECK(std::isinf(c.cfg.join_timeout_s));
  Node& p = c.add("p", random_params(3, 1), {"late"}, 1);
  c.run(300.0);
  CHECK(p.g->joining());
  CHECK(!p.g->join_failed());
  c.add("late", random_params(3, 2), {}, 2);
  c.run(302.0);
  CHECK(p.g->joined());
}

TEST_CASE("join: a founder alone at the deadline starts the swarm, and a late co-founder merges in") {
  Cluster c;
  c.cfg.join_timeout_s = 5;
  c.cfg.fetch_state = true;  // a founder must not wait for a model nobody can give
  // Seed lists as on a Slurm job: the first two tasks, each also listed itself.
  Node& a = c.add("a", random_params(3, 1), {"a", "b"}, 1);
  CHECK(!a.g->state_ready());
  c.run(4.0);
  CHECK(a.g->joining());
  c.run(5.5);
  CHECK(a.g->founded());
  CHECK(!a.g->join_failed());
  CHECK(!a.g->joining());
  CHECK(a.g->state_ready());
  // b comes up late: it joins through a (a's own requests reach it too); one swarm.
  Node& b = c.add("b", random_params(3, 2), {"a", "b"}, 2);
  c.run(8.0);
  CHECK(b.g->joined());
  CHECK(a.g->joined());
  CHECK(a.g->view().live_count() == 1);
  CHECK(b.g->view().live_count() == 1);
}

TEST_CASE("join: a founder reached by joiners before the deadline is in a swarm, and a joiner through two seeds survives a dead one") {
  Cluster c;
  c.cfg.join_timeout_s = 5;
  // b (the second seed) never comes up; a is a founder; x and y join through both.
  Node& a = c.add("a", random_params(3, 1), {"a", "b"}, 1);
  Node& x = c.add("x", random_params(3, 2), {"a", "b"}, 2);
  Node& y = c.add("y", random_params(3, 3), {"a", "b"}, 3);
  c.run(1.0);
  CHECK(!a.g->joining());  // x and y reached it
  CHECK(x.g->joined());
  CHECK(y.g->joined());
  c.run(10.0);
  CHECK(!a.g->join_failed());
  CHECK(!a.g->founded());  // not alone: nothing to found
  CHECK(!x.g->join_failed());
  CHECK(a.g->view().live_count() == 2);
  CHECK(x.g->view().live_count() == 2);
}

// The times at which `peer` sends a JoinRequest in `c` (nothing dropped).
static void record_join_requests(Cluster& c, const PeerId& peer, std::vector<double>& at) {
  c.drop = [&c, peer, &at](const PeerId& from, const PeerId&, const Message& m) {
    if (from == peer && m.type == MsgType::JoinRequest) at.push_back(c.now);
    return false;
  };
}

TEST_CASE("join: resends start 50 ms apart and double up to join_retry, so a seed a few ms late costs a few ms") {
  Cluster c;
  std::vector<double> sent;  // b's JoinRequests
  record_join_requests(c, "b", sent);
  // Launched together: b is ready 40 ms before its seed listens (its first request is refused).
  Node& b = c.add("b", random_params(3, 1), {"a"}, 1);
  c.run(0.04);
  CHECK(b.g->joining());
  c.add("a", random_params(3, 2), {}, 2);
  c.run(0.07);  // the resend at 50 ms, not a flat join_retry (1 s) later
  CHECK(b.g->joined());
  REQUIRE(sent.size() == 2);
  CHECK(sent[1] == doctest::Approx(0.05));

  // Nobody up: the gaps double from 50 ms and stay at join_retry.
  Cluster d;
  d.cfg.join_retry_s = 0.5;
  std::vector<double> at;
  record_join_requests(d, "p", at);
  Node& p = d.add("p", random_params(3, 1), {"absent"}, 1);
  d.run(3.0);
  CHECK(p.g->joining());
  const std::vector<double> gaps_expected = {0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5};
  REQUIRE(at.size() == gaps_expected.size() + 1);  // at 0, 0.05, 0.15, 0.35, 0.75, 1.25, ..., 2.75
  for (std::size_t i = 0; i < gaps_expected.size(); ++i) {
    INFO("gap " << i);
    CHECK(at[i + 1] - at[i] == doctest::Approx(gaps_expected[i]));
  }
}
