// Elastic membership on real peers over loopback: joiners get the model, crashes are detected
// within the bound, SIGTERM hands the model over, checkpoints survive SIGKILL and resume.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "peer/checkpoint.hpp"
#include "swarm.hpp"

using namespace rumor::test;
namespace fs = std::filesystem;

namespace {
bool have_fmnist() { return fs::exists("/usr/share/datasets/fashion-mnist"); }

std::vector<std::string> fast_detector() {
  return {"--probe-interval", "0.2", "--suspect-timeout", "1", "--exchange-timeout", "1"};
}

}  // namespace

TEST_CASE("elastic: a joiner's first evaluation is within 2 points of its neighbours") {
  if (!have_fmnist()) return;
  std::vector<std::vector<std::string>> f;
  for (int i = 0; i < 3; ++i) {
    // Long enough for a joiner that loads its data slowly on a busy machine; the swarm is
    // stopped (SIGTERM: a graceful leave) as soon as the joiner is done.
    std::vector<std::string> a{"--shard", std::to_string(i + 1) + "/4", "--duration", "40", "--eval-every", "100",
                               "--min-peers", "3", "--settle", "0"};
    f.push_back(a);
  }
  Swarm s("joiner", f);
  // Let the swarm learn for a while, then start a fourth peer through peer 1.
  REQUIRE(wait_until([&] { return metric_lines(s.metrics(0), "eval").size() >= 4; }, 60) >= 0);
  const auto jm = s.dir / "joiner.jsonl";
  Process joiner({"--shard", "4/4", "--duration", "3", "--eval-every", "100", "--join", s.peers[1]->listen_address(),
                  "--metrics", jm.string(), "--name", "joiner", "--settle", "0"},
                 s.dir / "joiner.log");
  REQUIRE(joiner.wait(60) == 0);
  for (auto& p : s.peers) p->signal(SIGTERM);
  REQUIRE(s.wait_all(60));
  const auto evals = metric_lines(jm, "eval");
  REQUIRE(!evals.empty());
  REQUIRE(metric_lines(jm, "state_received").size() == 1);
  const double first = field(evals.front(), "test_acc");
  const double step = field(evals.front(), "step");
  // The neighbours at the same point of training: their evaluations within 100 steps of the
  // step the joiner received. (An earlier form compared with peer 1's evaluation in the middle of
  // its run, hundreds of steps later when the joiner came early, and failed once in about 20
  // CI runs: 0.8131 against 0.8581, where peer 1 had been at 0.8493 three steps after the join.)
  double lo = 1, hi = 0;
  for (std::size_t i = 0; i < 3; ++i)
    for (const auto& l : metric_lines(s.metrics(i), "eval")) {
      const double st = field(l, "step");
      if (st > 0 && std::abs(st - step) <= 100) {
        lo = std::min(lo, field(l, "test_acc"));
        hi = std::max(hi, field(l, "test_acc"));
      }
    }
  INFO("joiner first eval " << first << " at step " << step << ", the neighbours within 100 steps " << lo << "-" << hi);
  REQUIRE(hi > 0);
  CHECK(first > 0.7);  // not a random model (0.1)
  CHECK(first >= lo - 0.02);
  CHECK(first <= hi + 0.02);
  CHECK(step > 50);  // it took the swarm's step too
}

TEST_CASE("elastic: SIGTERM exits 0 in time and its model reaches a neighbour") {
  std::vector<std::vector<std::string>> f;
  for (int i = 0; i < 3; ++i)
    f.push_back({"--data", "synthetic", "--model", "mlp:64", "--duration", "20", "--shard", std::to_string(i + 1) + "/3",
                 "--min-peers", "3"});
  Swarm s("sigterm", f);
  REQUIRE(wait_until([&] { return metric_lines(s.metrics(2), "eval").size() >= 1; }, 60) >= 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  s.peers[1]->signal(SIGTERM);
  REQUIRE(s.peers[1]->wait(10) == 0);
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(exit_s < 5.0);
  const std::string id = s.peers[1]->listen_address();
  std::size_t handovers = 0;
  for (int i : {0, 2})
    for (const auto& l : metric_lines(s.metrics(i), "handover")) handovers += l.find(id) != std::string::npos;
  CHECK(handovers == 1);
  for (int i : {0, 2}) {
    CHECK(wait_until([&] { return !metric_lines(s.metrics(i), "leave").empty(); }, 5) >= 0);
    s.peers[i]->signal(SIGINT);
    CHECK(s.peers[i]->wait(15) == 0);
  }
}

TEST_CASE("elastic: SIGKILL while checkpointing never leaves a checkpoint that loads wrong, and resume continues") {
  auto d = temp_dir("ckpt");
  const auto ck = d / "ck";
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    std::vector<std::string> a{"--data", "synthetic", "--model", "mlp:256", "--duration", "30", "--checkpoint",
                               ck.string(), "--checkpoint-every", "0.02"};
    if (round) a.push_back("--resume");
    Process p(a, d / ("log" + std::to_string(round)));
    REQUIRE(!p.listen_address().empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(600 + rng() % 700));
    p.signal(SIGKILL);
    p.wait(10);
    // Every complete checkpoint file reads back whole; partial writes are only ever .tmp files.
    std::size_t good = 0;
    for (const auto& e : fs::directory_iterator(ck)) {
      if (e.path().extension() != ".rkpt") continue;
      CHECK_NOTHROW(rumor::peer::read_checkpoint(e.path().string()));
      ++good;
    }
    CHECK(good >= 1);
  }
  // Corrupt the newest: resume must report it and use the one before.
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().extension() == ".rkpt") all.push_back(e.path());
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() >= 2);
  {
    std::fstream f(all.back(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  const auto expected = rumor::peer::read_checkpoint(all[all.size() - 2].string()).position.step;
  Process r({"--data", "synthetic", "--model", "mlp:256", "--steps", std::to_string(expected + 50), "--checkpoint",
             ck.string(), "--resume", "--metrics", (d / "m.jsonl").string()},
            d / "resume.log");
  REQUIRE(r.wait(60) == 0);
  CHECK(r.log().find("unusable") != std::string::npos);
  const auto evals = metric_lines(d / "m.jsonl", "eval");
  REQUIRE(!evals.empty());
  CHECK(field(evals.front(), "step") == expected);
  CHECK(field(metric_lines(d / "m.jsonl", "done").back(), "steps") == expected + 50);
}
