// A convolutional model through real rumor-peer processes on loopback (`--data synthetic`:
// 64 features, trained as 8x8 single-channel images): two peers train a CNN together, the
// second joins the running first and receives its model and step (state transfer), a
// checkpoint of the CNN resumes at its step, and a bad spec exits 2 naming the bad token.
#include <doctest/doctest.h>

#include <algorithm>

#include "peer/checkpoint.hpp"
#include "swarm.hpp"

using namespace rumor::test;
namespace fs = std::filesystem;

namespace {
const std::string kCnn = "cnn:c8k3p1,p2,f32";

}  // namespace

TEST_CASE("cnn swarm: a joiner receives the CNN's state, the pair trains, a CNN checkpoint resumes") {
  const auto d = temp_dir("cnn");
  const auto ck = d / "ck";
  // Peer 0 trains alone, checkpointing, until peer 1 has joined and finished.
  Process p0({"--data", "synthetic", "--model", kCnn, "--lr", "3e-3", "--shard", "1/2", "--duration", "60", "--eval-every", "100",
              "--checkpoint", ck.string(), "--checkpoint-every", "0.2", "--metrics", (d / "m0").string(), "--name",
              "p0", "--settle", "0"},
             d / "log0");
  REQUIRE(!p0.listen_address().empty());
  REQUIRE(0 <= wait_until([&] { return metric_lines(d / "m0", "eval").size() >= 3; }, 40));
  Process p1({"--data", "synthetic", "--model", kCnn, "--lr", "3e-3", "--shard", "2/2", "--steps", "1500", "--eval-every", "100",
              "--join", p0.listen_address(), "--metrics", (d / "m1").string(), "--name", "p1", "--settle", "0"},
             d / "log1");
  REQUIRE(p1.wait(60) == 0);
  p0.signal(SIGTERM);
  REQUIRE(p0.wait(30) == 0);

  // The joiner started from the swarm's model and step, not from random weights.
  REQUIRE(metric_lines(d / "m1", "state_received").size() == 1);
  const auto e1 = metric_lines(d / "m1", "eval");
  REQUIRE(!e1.empty());
  INFO("joiner's first eval: " << e1.front());
  CHECK(field(e1.front(), "step") >= 200);
  CHECK(field(e1.front(), "test_acc") > 0.4);  // 10 classes: a fresh model is at 0.1
  // They exchanged CNN parameters (same fingerprint) and both learned the task.
  const std::string done1 = metric_lines(d / "m1", "done").back();
  CHECK(field(done1, "exchanges") > 0);
  // (This small CNN ends near 0.72 on the synthetic Gaussian mixture, which is no image task.)
  CHECK(field(done1, "test_acc") > 0.6);
  CHECK(field(metric_lines(d / "m0", "done").back(), "test_acc") > 0.6);

  // Resume from peer 0's newest checkpoint: the same step, then 50 more.
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().extension() == ".rkpt") all.push_back(e.path());
  REQUIRE(!all.empty());
  std::sort(all.begin(), all.end());
  const auto saved = rumor::peer::read_checkpoint(all.back().string());
  const auto step = saved.position.step;
  Process r({"--data", "synthetic", "--model", kCnn, "--shard", "1/2", "--steps", std::to_string(step + 50),
             "--checkpoint", ck.string(), "--resume", "--metrics", (d / "mr").string()},
            d / "resume.log");
  REQUIRE(r.wait(60) == 0);
  const auto er = metric_lines(d / "mr", "eval");
  REQUIRE(!er.empty());
  CHECK(field(er.front(), "step") == step);
  CHECK(field(er.front(), "test_acc") > 0.6);
  CHECK(field(metric_lines(d / "mr", "done").back(), "steps") == step + 50);

  // The checkpoints belong to this architecture: another CNN skips them and starts afresh.
  fs::create_directories(d / "ck_other");
  fs::copy_file(all.back(), d / "ck_other" / all.back().filename());
  Process other({"--data", "synthetic", "--model", "cnn:c8k3,p2,f32", "--shard", "1/2", "--steps", "10",
                 "--checkpoint", (d / "ck_other").string(), "--resume", "--metrics", (d / "mo").string()},
                d / "other.log");
  REQUIRE(other.wait(60) == 0);
  CHECK(other.log().find("of another model") != std::string::npos);
  CHECK(field(metric_lines(d / "mo", "eval").front(), "step") == 0);
}

TEST_CASE("cnn swarm: a bad --model spec exits 2 naming the bad token") {
  const auto d = temp_dir("cnn_bad");
  Process p({"--data", "synthetic", "--model", "cnn:c8k3,q2"}, d / "log");
  CHECK(p.wait(20) == 2);
  CHECK(p.log().find("'q2'") != std::string::npos);
  Process q({"--data", "synthetic", "--model", "cnn:c8k9"}, d / "log2");  // kernel larger than the 8x8 input
  CHECK(q.wait(20) == 2);
  CHECK(q.log().find("'c8k9'") != std::string::npos);
}
