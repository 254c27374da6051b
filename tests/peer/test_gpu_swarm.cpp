// Mixed swarms: a GPU peer (--device cuda) and a CPU peer on loopback speak the same wire
// format, average to the same model and train as well as two CPU peers. The averaging test runs
// everywhere: without a GPU its device peer is --device emulated (the CPU's math through the
// GPU peer's data flow: resident state, the host mirror, params_written), which checks the
// daemon's side of the mirror rule on every machine. The training comparison needs a real GPU
// and is skipped ("SKIPPED: no CUDA device", which ctest reports as skipped) without one.
#include <doctest/doctest.h>
#include <fmt/core.h>

#include <memory>

#include "core/mix.hpp"
#include "core/model.hpp"
#include "process.hpp"
#include "peer/gpu_plugin.hpp"

using namespace rumor::test;
namespace fs = std::filesystem;

namespace {
bool have_gpu() {
#ifdef RUMOR_HAVE_CUDA
  return rumor::peer::cuda_device_count() > 0;
#else
  return false;
#endif
}

bool gpu_or_skip() {
#ifdef RUMOR_HAVE_CUDA
  std::string why;
  if (rumor::peer::cuda_device_count(&why) > 0) return true;
  fmt::print("SKIPPED: no CUDA device ({})\n", why);
#else
  fmt::print("SKIPPED: no CUDA device (this build has no CUDA backend)\n");
#endif
  return false;
}

std::vector<float> read_floats(const fs::path& p) {
  const std::string s = read_text(p);
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

// Two peers (devices a, b) on shards 1/2 and 2/2; returns their "done" metrics lines.
std::vector<std::string> run_pair(const fs::path& d, const std::string& a, const std::string& b,
                                  std::vector<std::string> common) {
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed_addr;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--device", i == 0 ? a : b, "--shard", std::to_string(i + 1) + "/2", "--min-peers", "2",
                             "--metrics", (d / ("m" + std::to_string(i))).string(), "--save-params",
                             (d / ("p" + std::to_string(i))).string()});
    if (i) args.insert(args.end(), {"--join", seed_addr});
    peers.push_back(std::make_unique<Process>(args, d / ("log" + std::to_string(i))));
    if (i == 0) seed_addr = peers[0]->listen_address();
    REQUIRE(!seed_addr.empty());
  }
  std::vector<std::string> done;
  for (int i = 0; i < 2; ++i) {
    const auto rc = peers[i]->wait(150);
    INFO(peers[i]->log());
    REQUIRE(rc == 0);
    const auto lines = metric_lines(d / ("m" + std::to_string(i)), "done");
    REQUIRE(lines.size() == 1);
    done.push_back(lines[0]);
  }
  return done;
}
}  // namespace

TEST_CASE("gpu swarm: a device peer and a CPU peer averaging (lr 0) reach the mean of their initial models") {
  const std::string device = have_gpu() ? "cuda" : "emulated";
  MESSAGE("device peer: --device " << device);
  auto d = temp_dir("gpu-average");
  std::vector<std::unique_ptr<Process>> peers;
  std::string seed_addr;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> a{"--data", "synthetic", "--model", "mlp:32", "--lr", "0", "--duration", "4",
                               "--min-peers", "2", "--init-seed", std::to_string(200 + i), "--shard",
                               std::to_string(i + 1) + "/2", "--device", i == 0 ? device : "cpu", "--save-params",
                               (d / ("p" + std::to_string(i))).string(), "--exchange-timeout", "1"};
    if (i) a.insert(a.end(), {"--join", seed_addr});
    peers.push_back(std::make_unique<Process>(a, d / ("log" + std::to_string(i))));
    if (i == 0) seed_addr = peers[0]->listen_address();
    REQUIRE(!seed_addr.empty());
  }
  for (auto& p : peers) REQUIRE(p->wait(60) == 0);
  auto model = rumor::make_model("mlp:32", 64, 10);
  std::vector<double> mean(model->param_count(), 0.0);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> p(model->param_count());
    rumor::Rng r(200 + i);
    model->init(p, r);
    for (std::size_t k = 0; k < p.size(); ++k) mean[k] += p[k] / 2;
  }
  const std::vector<float> m(mean.begin(), mean.end());
  for (int i = 0; i < 2; ++i) {
    const auto p = read_floats(d / ("p" + std::to_string(i)));
    REQUIRE(p.size() == m.size());
    INFO((i == 0 ? device : "cpu") << " peer: relative distance to the mean " << rumor::relative_distance(p, m));
    CHECK(rumor::relative_distance(p, m) < 1e-5);
  }
}

TEST_CASE("gpu swarm: one GPU peer and one CPU peer train like two CPU peers") {
  if (!gpu_or_skip()) return;
  const bool fmnist = fs::exists("/usr/share/datasets/fashion-mnist");
  std::vector<std::string> common{"--epochs", "1", "--seed", "3"};
  if (!fmnist) common.insert(common.end(), {"--data", "synthetic"});
  auto d1 = temp_dir("gpu-pair-cpu"), d2 = temp_dir("gpu-pair-mixed");
  const auto cpu = run_pair(d1, "cpu", "cpu", common);
  const auto mixed = run_pair(d2, "cuda", "cpu", common);
  // The first peer of the mixed pair really ran on the GPU.
  const auto start = metric_lines(d2 / "m0", "start");
  REQUIRE(start.size() == 1);
  CHECK(start[0].find("\"device\":\"cuda:") != std::string::npos);
  const double floor = fmnist ? 0.80 : 0.75;  // two CPU peers: about 0.84 on either after 1 epoch
  for (int i = 0; i < 2; ++i) {
    INFO("cpu pair: " << cpu[i] << "\nmixed pair: " << mixed[i]);
    CHECK(field(mixed[i], "test_acc") >= floor);
    CHECK(field(mixed[i], "test_acc") >= std::min(field(cpu[0], "test_acc"), field(cpu[1], "test_acc")) - 0.02);
    CHECK(field(mixed[i], "exchanges") > 20);
  }
}
