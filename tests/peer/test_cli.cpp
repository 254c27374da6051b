// rumor-peer as a user runs it: flags, bad input files, metrics, a single-peer run.
#include <doctest/doctest.h>

#include <zlib.h>

#include <cstdio>

#include "core/knobs.hpp"
#include "peer/config.hpp"
#include "process.hpp"
#include "sim/peer_flags.hpp"
#include "peer/gpu_plugin.hpp"

using namespace rumor::test;
namespace fs = std::filesystem;

TEST_CASE("cli: a bad flag is refused with the usage line and exit code 2") {
  auto d = temp_dir("badflag");
  Process p({"--no-such-flag"}, d / "log");
  CHECK(p.wait(10) == 2);
  CHECK(p.log().find("Usage:") != std::string::npos);
  Process q({"--shard", "5/4", "--data", "synthetic"}, d / "log2");
  CHECK(q.wait(10) == 2);
  CHECK(q.log().find("5/4") != std::string::npos);
  Process r({"--join", "127.0.0.1"}, d / "log3");
  CHECK(r.wait(10) == 2);
  CHECK(r.log().find("HOST:PORT") != std::string::npos);
  Process i({"--init", "xavier", "--data", "synthetic"}, d / "log5");
  CHECK(i.wait(10) == 2);
  CHECK(i.log().find("--init") != std::string::npos);
  CHECK(i.log().find("torch") != std::string::npos);
  Process h({"--help"}, d / "log4");
  CHECK(h.wait(10) == 0);
}

TEST_CASE("cli: a missing data directory names the Debian package and --data synthetic") {
  auto d = temp_dir("nodata");
  Process p({"--data", (d / "nowhere").string()}, d / "log");
  CHECK(p.wait(10) == 2);
  const std::string log = p.log();
  CHECK(log.find("dataset-fashion-mnist") != std::string::npos);
  CHECK(log.find("--data synthetic") != std::string::npos);
}

TEST_CASE("cli: a truncated or corrupt IDX file is named, exit 2, no crash") {
  const fs::path real = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(real)) {
    MESSAGE("Fashion-MNIST not installed; skipped");
    return;
  }
  auto d = temp_dir("corrupt");
  for (const char* f : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(real / f, d / f);
  // Truncated gzip of the training images.
  {
    const std::string bytes = read_text(real / "train-images-idx3-ubyte.gz");
    std::ofstream(d / "train-images-idx3-ubyte.gz", std::ios::binary).write(bytes.data(), 100000);
  }
  Process p({"--data", d.string()}, d / "log");
  CHECK(p.wait(20) == 2);
  CHECK(p.log().find("train-images-idx3-ubyte.gz") != std::string::npos);
  // An uncompressed IDX file with a bad magic.
  fs::remove(d / "train-images-idx3-ubyte.gz");
  std::ofstream(d / "train-images-idx3-ubyte", std::ios::binary) << std::string("\x01\x02\x08\x03garbage", 11);
  Process q({"--data", d.string()}, d / "log2");
  CHECK(q.wait(20) == 2);
  const std::string log = q.log();
  CHECK(log.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(log.find("magic") != std::string::npos);
}

TEST_CASE("cli: one peer trains on the synthetic task and writes eval and done metrics") {
  auto d = temp_dir("single");
  Process p({"--data", "synthetic", "--model", "mlp:64", "--epochs", "2", "--metrics", (d / "m.jsonl").string()},
            d / "log");
  REQUIRE(p.wait(120) == 0);
  const auto evals = metric_lines(d / "m.jsonl", "eval");
  REQUIRE(evals.size() == 3);  // at start, after epoch 1, final
  CHECK(field(evals.front(), "step") == 0);
  CHECK(field(evals.front(), "test_acc") < 0.3);
  const auto done = metric_lines(d / "m.jsonl", "done");
  REQUIRE(done.size() == 1);
  CHECK(field(done[0], "test_acc") > 0.8);
  CHECK(field(done[0], "steps") == 500);  // 16000 rows / 64 = 250 steps per epoch
  for (const char* k : {"t", "epoch", "loss", "samples_per_s", "bytes_sent", "bytes_recv", "exchanges", "peers"})
    CHECK_MESSAGE(!std::isnan(field(evals.back(), k)), k);
  CHECK(p.log().find("test_acc") != std::string::npos);
  const auto start = metric_lines(d / "m.jsonl", "start");
  REQUIRE(start.size() == 1);
  CHECK(start[0].find("\"device\":\"cpu\"") != std::string::npos);
}

TEST_CASE("cli: --device cuda without a CUDA backend or a GPU fails clearly, before training") {
  auto d = temp_dir("nocuda");
  Process bad({"--device", "tpu", "--data", "synthetic"}, d / "log0");
  CHECK(bad.wait(10) == 2);
  CHECK(bad.log().find("expected cpu, cuda or cuda:N") != std::string::npos);
#ifdef RUMOR_HAVE_CUDA
  // This build has the backend: ask for a device that is not there (here: any, where no GPU
  // is; on a GPU machine, one past the last).
  const int n = rumor::peer::cuda_device_count();
  const std::string dev = n == 0 ? "cuda" : "cuda:" + std::to_string(n);
  const std::string expect = n == 0 ? "no CUDA device found" : "CUDA device " + std::to_string(n) + " not found";
  const int rc = 1;
#else
  const std::string dev = "cuda";
  const std::string expect =
      "CUDA requested but this build has no CUDA backend (rebuild with RUMOR_CUDA=ON where nvcc exists)";
  const int rc = 2;
#endif
  Process p({"--device", dev, "--data", "synthetic", "--steps", "50"}, d / "log");
  CHECK(p.wait(20) == rc);
  const std::string log = p.log();
  INFO(log);
  CHECK(log.find(expect) != std::string::npos);
  CHECK(log.find("loaded in") == std::string::npos);  // failed before loading data or training
  CHECK(log.find("epoch") == std::string::npos);
}

TEST_CASE("cli: every loop knob is a flag with the table's default, and a bad value gets the table's words") {
  auto d = temp_dir("knobs");
  std::string help;  // --help goes to stdout
  {
    std::FILE* f = ::popen((peer_binary() + " --help").c_str(), "r");
    REQUIRE(f);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) help.append(buf, n);
    REQUIRE(::pclose(f) == 0);
  }
  const rumor::LoopSettings defaults;
  for (const rumor::Knob& k : rumor::loop_knobs()) {
    if (!(k.scope & rumor::Knob::kDaemon)) continue;
    CAPTURE(k.name);
    const std::string flag = rumor::knob_flag(k);
    // The flag's own line (another knob's words may name it: "With --local-steps auto or --codec auto").
    const std::string line = "\n  " + flag;
    auto at = help.find(line + " ") != std::string::npos ? help.find(line + " ") : help.find(line + "=");
    REQUIRE(at != std::string::npos);
    ++at;  // past the newline
    const std::string shown = k.default_text ? k.default_text : rumor::knob_value(k, defaults);
    CHECK(help.substr(at, help.find('\n', at) - at).find("=" + shown) != std::string::npos);
  }
  // The same words as the scenario key and the Python keyword (core's set_knob).
  Process p({"--exchange-timeout", "5 parsecs", "--data", "synthetic"}, d / "bad");
  CHECK(p.wait(10) == 2);
  CHECK(p.log().find("--exchange-timeout: unknown time unit 'parsecs'") != std::string::npos);
  Process q({"--staleness", "1.5", "--data", "synthetic"}, d / "bad2");
  CHECK(q.wait(10) == 2);
  CHECK(q.log().find("--staleness: expected a whole number of steps >= 0, or inf, got '1.5'") != std::string::npos);
}

TEST_CASE("cli: a scenario's --peer-flags are what rumor-peer parses into the same settings") {
  const auto s = rumor::sim::load_scenario(std::string(RUMOR_SOURCE_DIR) + "/examples/sim/quickstart.ini",
                                           {"gossip.local_steps=8", "gossip.codec=int8", "gossip.robust=on",
                                            "run.settle=250ms", "gossip.staleness=4", "workload.lr=2e-3",
                                            "workload.init=torch"});
  for (std::uint32_t k = 1; k <= s.founders; ++k) {
    CAPTURE(k);
    std::vector<std::string> args = {"rumor-peer"};
    for (const auto& f : rumor::sim::peer_flags(s, k)) args.push_back(f);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    const auto r = rumor::peer::parse_command_line(static_cast<int>(argv.size()), argv.data());
    REQUIRE(r.config);
    const auto& c = *r.config;
    CHECK(c.shard == std::to_string(k) + "/4");
    CHECK(c.model == s.model);
    CHECK(c.schedule.base_lr == doctest::Approx(2e-3));
    CHECK(c.init == "torch");
    for (const rumor::Knob& knob : rumor::loop_knobs())
      if ((knob.scope & rumor::Knob::kDaemon) && (knob.scope & rumor::Knob::kSim)) {
        CAPTURE(knob.name);
        CHECK(rumor::knob_value(knob, c.loop) == rumor::knob_value(knob, s.loop));
      }
  }
  CHECK(s.loop.min_peers == 4);  // the quickstart's peers start together
}

TEST_CASE("cli: a CPU peer does not load the CUDA libraries, and the CUDA plugin loads for --device cuda") {
  // The CUDA backend is a plugin (peer/gpu_plugin.hpp): rumor-peer itself links neither
  // libcudart nor libcublas, which cost every CPU peer 0.45 s of start-up here.
  FILE* f = ::popen(("ldd " + peer_binary() + " 2>&1").c_str(), "r");
  REQUIRE(f);
  std::string ldd;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) ldd.append(buf, n);
  ::pclose(f);
  INFO(ldd);
  CHECK(ldd.find("libcublas") == std::string::npos);
  CHECK(ldd.find("libcudart") == std::string::npos);
  if (!rumor::peer::cuda_built()) return;
  // This build has the backend: the plugin is found beside the binaries and its runtime
  // answers (0 devices and the runtime's reason where there is no GPU).
  std::string why;
  const int n = rumor::peer::cuda_device_count(&why);
  INFO("devices " << n << ": " << why);
  CHECK(why.find("could not be loaded") == std::string::npos);
}
