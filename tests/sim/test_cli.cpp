// rumor-sim as a program: byte-identical files from separate processes (whatever the output
// path or the order of --set), exit code 2 with the place and key for a bad scenario.
// Skipped, with a message, when the rumor-sim binary has not been built.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
const std::string kSim = std::string(RUMOR_BINARY_DIR) + "/sim/rumor-sim";
const std::string kDir = std::string(RUMOR_BINARY_DIR) + "/test_sim_cli";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int run(const std::string& args, const std::string& log) {
  const int rc = std::system((kSim + " " + args + " >" + log + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char* kScenario = R"(
[run]
peers = 5
seed = 4
[workload]
data = synthetic
model = logreg
batch = 32
steps = 40
[compute]
step_time = 5ms
dist = lognormal
sd = 0.3
[churn]
crash = p1 at 0.1
[output]
sample_every = 0.05
eval_rows = 400
)";

}  // namespace

TEST_CASE("cli: separate runs give byte-identical files, a bad scenario exits 2 naming the line") {
  if (!fs::exists(kSim)) {
    MESSAGE("rumor-sim is not built (" << kSim << "): skipped");
    return;
  }
  fs::create_directories(kDir);
  { std::ofstream(kDir + "/s.ini") << kScenario; }
  REQUIRE(run(kDir + "/s.ini --out " + kDir + "/a --set compute.sd=0.3 --set run.seed=4", kDir + "/a.log") == 0);
  REQUIRE(run(kDir + "/s.ini --seed 4 --out " + kDir + "/a_much_longer_output_directory_name_than_before",
              kDir + "/b.log") == 0);
  for (const char* f : {"timeseries.csv", "events.csv", "summary.json"}) {
    INFO(f);
    const std::string a = slurp(kDir + "/a/" + f), b = slurp(kDir + "/a_much_longer_output_directory_name_than_before/" + f);
    CHECK(a.size() > 100);
    CHECK(a == b);
  }
  REQUIRE(run(kDir + "/s.ini --seed 5 --out " + kDir + "/c", kDir + "/c.log") == 0);
  CHECK(slurp(kDir + "/a/timeseries.csv") != slurp(kDir + "/c/timeseries.csv"));

  { std::ofstream(kDir + "/bad.ini") << "[run]\npeers = 4\n[network]\nlatency = soon\n"; }
  CHECK(run(kDir + "/bad.ini --out " + kDir + "/bad", kDir + "/bad.log") == 2);
  const std::string msg = slurp(kDir + "/bad.log");
  CHECK(msg.find("bad.ini:4: network.latency") != std::string::npos);
  CHECK(run(kDir + "/s.ini --set network.nope=1 --out " + kDir + "/bad", kDir + "/bad2.log") == 2);
  CHECK(slurp(kDir + "/bad2.log").find("--set #1") != std::string::npos);
  CHECK(run("--no-such-flag", kDir + "/bad3.log") == 2);
}

TEST_CASE("cli: a sweep writes its tables and prints the summary, a bad combination exits 2 and writes nothing") {
  if (!fs::exists(kSim)) {
    MESSAGE("rumor-sim is not built (" << kSim << "): skipped");
    return;
  }
  fs::create_directories(kDir);
  const std::string grid = std::string(kScenario).substr(0, std::string(kScenario).find("[churn]")) +
                           "[workload]\noptimizer = sgd\nlr = 0.1\n[sweep]\nalgorithm = allreduce, dpsgd+topology=ring\nseeds = 1,2\n"
                           "target = 0.3\n";
  { std::ofstream(kDir + "/grid.ini") << grid; }
  fs::remove_all(kDir + "/sweep");
  REQUIRE(run(kDir + "/grid.ini --out " + kDir + "/sweep", kDir + "/sweep.log") == 0);
  const std::string printed = slurp(kDir + "/sweep.log");
  CHECK(printed.find("| allreduce | 2 | 2 |") != std::string::npos);  // the markdown table, both seeds reached
  CHECK(printed.find("sweep of 4 runs") != std::string::npos);
  for (const char* f : {"sweep.csv", "runs.csv", "summary.csv", "summary.md", "runs/003/summary.json"}) {
    INFO(f);
    CHECK(fs::exists(kDir + "/sweep/" + f));
  }
  CHECK(slurp(kDir + "/sweep/runs/003/summary.json").find("\"algorithm\": \"dpsgd\"") != std::string::npos);
  // dpsgd on a hypercube of 5 does not exist: refused before anything runs.
  fs::remove_all(kDir + "/sweep_bad");
  CHECK(run(kDir + "/grid.ini --set sweep.topology=ring,hypercube --out " + kDir + "/sweep_bad", kDir + "/sweep_bad.log") == 2);
  CHECK(slurp(kDir + "/sweep_bad.log").find("hypercube") != std::string::npos);
  CHECK(!fs::exists(kDir + "/sweep_bad"));
}

TEST_CASE("cli: --calibrate-model refuses a bad model spec, or use without --calibrate, before measuring anything") {
  if (!fs::exists(kSim)) {
    MESSAGE("rumor-sim is not built (" << kSim << "): skipped");
    return;
  }
  fs::create_directories(kDir);
  const std::string out = kDir + "/calib_never_written.ini";
  fs::remove(out);
  CHECK(run("--calibrate --calibrate-model cnn:c16q3 --calibrate-out " + out, kDir + "/cm1.log") == 2);
  const std::string msg = slurp(kDir + "/cm1.log");
  CHECK(msg.find("--calibrate-model 'cnn:c16q3'") != std::string::npos);
  CHECK(msg.find("calibrate:") == std::string::npos);  // nothing was measured
  CHECK(!fs::exists(out));
  { std::ofstream(kDir + "/s.ini") << kScenario; }
  CHECK(run(kDir + "/s.ini --calibrate-model mlp:64 --out " + kDir + "/cm", kDir + "/cm2.log") == 2);
  CHECK(slurp(kDir + "/cm2.log").find("--calibrate-model only applies to --calibrate") != std::string::npos);
}
