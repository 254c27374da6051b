// Swarms of rumor-peer processes on loopback: averaging, accuracy, a crash. Every test is
// bounded: processes that overrun are killed and the test fails.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/mix.hpp"
#include "core/model.hpp"
#include "process.hpp"

using namespace rumor::test;
namespace fs = std::filesystem;

namespace {
std::vector<float> read_floats(const fs::path& p) {
  const std::string s = read_text(p);
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}
}  // namespace

TEST_CASE("swarm: pure averaging (lr 0) brings every peer to the mean of the initial parameters") {
  const int n = 5;
  auto d = temp_dir("average");
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed_addr;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> a{"--data", "synthetic", "--model", "logreg", "--lr", "0", "--duration", "5", "--min-peers", "5",
                               "--init-seed", std::to_string(100 + i), "--shard", std::to_string(i + 1) + "/" + std::to_string(n),
                               "--save-params", (d / ("p" + std::to_string(i))).string(), "--exchange-timeout", "1"};
    if (i) a.insert(a.end(), {"--join", seed_addr});
    peers.push_back(std::make_unique<Process>(a, d / ("log" + std::to_string(i))));
    if (i == 0) {
      seed_addr = peers[0]->listen_address();
      REQUIRE(!seed_addr.empty());
    }
  }
  for (auto& p : peers) REQUIRE(p->wait(60) == 0);
  // The mean of the initial parameters, computed with the same seeded initialisation.
  auto model = rumor::make_model("logreg", 64, 10);
  std::vector<double> mean(model->param_count(), 0.0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> p(model->param_count());
    rumor::Rng r(100 + i);
    model->init(p, r);
    for (std::size_t k = 0; k < p.size(); ++k) mean[k] += p[k] / n;
  }
  const std::vector<float> m(mean.begin(), mean.end());
  for (int i = 0; i < n; ++i) {
    const auto p = read_floats(d / ("p" + std::to_string(i)));
    REQUIRE(p.size() == m.size());
    const double dist = rumor::relative_distance(p, m);
    INFO("peer " << i << " relative distance to the mean " << dist);
    CHECK(dist < 1e-5);
  }
}

TEST_CASE("swarm: 4 peers on Fashion-MNIST shards reach 0.85 test accuracy in 2 epochs") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) {
    MESSAGE("Fashion-MNIST not installed; skipped");
    return;
  }
  auto d = temp_dir("fmnist");
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed_addr;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> a{"--shard", std::to_string(i + 1) + "/4", "--epochs", "2", "--min-peers", "4",
                               "--metrics", (d / ("m" + std::to_string(i))).string()};
    if (i) a.insert(a.end(), {"--join", seed_addr});
    peers.push_back(std::make_unique<Process>(a, d / ("log" + std::to_string(i))));
    if (i == 0) {
      seed_addr = peers[0]->listen_address();
      REQUIRE(!seed_addr.empty());
    }
  }
  for (int i = 0; i < 4; ++i) {
    REQUIRE(peers[i]->wait(180) == 0);
    const auto done = metric_lines(d / ("m" + std::to_string(i)), "done");
    REQUIRE(done.size() == 1);
    INFO("peer " << i << ": " << done[0]);
    CHECK(field(done[0], "test_acc") >= 0.85);
    CHECK(field(done[0], "exchanges") > 20);
  }
}

TEST_CASE("swarm: a peer killed with SIGKILL mid-run does not hang the others") {
  auto d = temp_dir("kill");
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed_addr;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> a{"--data", "synthetic", "--model", "mlp:64", "--duration", "6", "--shard",
                               std::to_string(i + 1) + "/4", "--metrics", (d / ("m" + std::to_string(i))).string(),
                               "--exchange-timeout", "1", "--suspect-timeout", "1"};
    if (i) a.insert(a.end(), {"--join", seed_addr});
    peers.push_back(std::make_unique<Process>(a, d / ("log" + std::to_string(i))));
    if (i == 0) {
      seed_addr = peers[0]->listen_address();
      REQUIRE(!seed_addr.empty());
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  peers[2]->signal(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i : {0, 1, 3}) {
    REQUIRE(peers[i]->wait(30) == 0);
    const auto done = metric_lines(d / ("m" + std::to_string(i)), "done");
    REQUIRE(done.size() == 1);
    CHECK(field(done[0], "wall_s") < 9.0);  // 6 s of training plus slack: nobody waited on the dead
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 15);
}
