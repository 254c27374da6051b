// The comparison algorithms of sim/algorithms.hpp, each on a case with a known answer
// (docs/sim.md, "Checks of the algorithms", lists them with the expected numbers and
// tolerances), and sweeps (sim/sweep.hpp): the grid, its errors, and determinism with runs in
// parallel. Small swarms on the quadratic or the synthetic task keep each case well under a
// second.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <sstream>
#include <string>

#include <unistd.h>

#include "sim/algorithms.hpp"
#include "sim/mixing.hpp"
#include "sim/scenario.hpp"
#include "sim/sweep.hpp"

using namespace rumor::sim;

namespace {

Scenario scn(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_scenario(text, "test.ini", sets);
}

// Pure averaging: dyadic starting values (bits:8), so that halving stays exact in float.
const char* kAveraging = R"(
[run]
peers = 16
[algorithm]
kind = dpsgd
[workload]
kind = quadratic
training = off
dim = 24
init_values = bits:8
steps = 4
[gossip]
topology = onepeer_exp
[output]
eval_peers = 0
)";

// Training on the synthetic task (64 features, 10 classes): logistic regression, plain SGD.
const char* kTrain = R"(
[run]
peers = 8
seed = 3
[workload]
data = synthetic
model = logreg
optimizer = sgd
momentum = 0
lr = 0.1
batch = 32
steps = 30
[compute]
step_time = 10ms
[network]
latency = 1ms
bandwidth = 1Gbit
[output]
eval_peers = 0
eval_rows = 500
sample_every = 0.1
)";

std::vector<double> mean_of(const AlgorithmRun& r) {
  std::vector<double> m(r.params(0).size(), 0.0);
  for (std::uint32_t i = 0; i < r.peers(); ++i)
    for (std::size_t k = 0; k < m.size(); ++k) m[k] += r.params(i)[k];
  for (auto& v : m) v /= r.peers();
  return m;
}

double max_rel_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    num = std::max(num, std::fabs(double(a[k]) - double(b[k])));
    den = std::max(den, std::fabs(double(b[k])));
  }
  return num / den;
}

}  // namespace

TEST_CASE("algorithms: SLEM of the ring, hypercube, complete and one-peer exponential graphs") {
  for (std::uint32_t n : {10u, 16u, 25u}) {
    const CommGraph g(Topology::Ring, n, 0, 1);
    const double expect = (1 + 2 * std::cos(2 * std::numbers::pi / n)) / 3;  // eigenvalues (1 + 2cos(2 pi k/n))/3
    CHECK(mixing_spectrum({dpsgd_mixing(g.at(0), MixingWeights::Uniform)}, n).slem == doctest::Approx(expect).epsilon(1e-12));
    CHECK(mixing_spectrum({dpsgd_mixing(g.at(0), MixingWeights::Metropolis)}, n).slem == doctest::Approx(expect).epsilon(1e-12));
  }
  const CommGraph h(Topology::Hypercube, 16, 0, 1);  // W = (I + A)/5, eigenvalues (1 + 4 - 2k)/5
  CHECK(mixing_spectrum({dpsgd_mixing(h.at(0), MixingWeights::Uniform)}, 16).slem == doctest::Approx(0.6).epsilon(1e-12));
  const CommGraph c(Topology::Complete, 12, 0, 1);
  CHECK(mixing_spectrum({dpsgd_mixing(c.at(0), MixingWeights::Uniform)}, 12).slem < 1e-12);
  // One-peer exponential: tau = log2 n rounds of (I + P_t)/2 multiply to 11^T/n exactly.
  const CommGraph o(Topology::OnePeerExponential, 16, 0, 1);
  REQUIRE(o.period() == 4);
  std::vector<Mixing> period;
  for (std::uint32_t t = 0; t < o.period(); ++t) period.push_back(dpsgd_mixing(o.at(t), MixingWeights::Uniform));
  CHECK(mixing_spectrum(period, 16).slem < 1e-12);
  // Not for n = 12: 4 rounds leave a residue.
  const CommGraph o12(Topology::OnePeerExponential, 12, 0, 1);
  std::vector<Mixing> p12;
  for (std::uint32_t t = 0; t < o12.period(); ++t) p12.push_back(dpsgd_mixing(o12.at(t), MixingWeights::Uniform));
  CHECK(mixing_spectrum(p12, 12).slem > 0.05);
  // A random d-regular graph is simple and d-regular.
  const CommGraph r(Topology::RandomRegular, 20, 3, 7);
  for (std::uint32_t i = 0; i < 20; ++i) {
    CHECK(r.at(0).out[i].size() == 3);
    CHECK(r.at(0).in[i].size() == 3);
  }
}

TEST_CASE("algorithms: D-PSGD on the one-peer exponential graph averages exactly in log2(n) rounds") {
  for (std::uint64_t rounds : {3u, 4u}) {
    AlgorithmRun run(scn(kAveraging, {"workload.steps=" + std::to_string(rounds)}));
    const std::vector<double> mean0 = mean_of(run);
    run.run();
    REQUIRE(run.rounds() == rounds);
    double worst = 0;
    for (std::uint32_t i = 0; i < 16; ++i)
      for (std::size_t k = 0; k < mean0.size(); ++k) worst = std::max(worst, std::fabs(run.params(i)[k] - mean0[k]));
    if (rounds == 4) {
      CHECK(worst == 0.0);  // exactly the mean, on every peer
      CHECK(run.samples().back().consensus_distance == 0.0);
    } else {
      CHECK(worst > 1e-3);  // 3 rounds are not enough
    }
    CHECK(run.spectrum().slem < 1e-12);
  }
}

TEST_CASE("algorithms: D-PSGD pure averaging on the ring contracts at the SLEM per round") {
  // The slowest mode decays by the SLEM each round: over rounds 100..200 the consensus
  // distance falls by slem^100 (the mean is conserved, so |xbar| is constant).
  const std::string ring = "gossip.topology=ring";
  AlgorithmRun a(scn(kAveraging, {ring, "workload.init_values=normal", "workload.steps=100"}));
  AlgorithmRun b(scn(kAveraging, {ring, "workload.init_values=normal", "workload.steps=200"}));
  a.run();
  b.run();
  const double slem = (1 + 2 * std::cos(2 * std::numbers::pi / 16)) / 3;
  CHECK(a.spectrum().slem == doctest::Approx(slem).epsilon(1e-12));
  const double ratio = b.samples().back().consensus_distance / a.samples().back().consensus_distance;
  CHECK(ratio == doctest::Approx(std::pow(slem, 100)).epsilon(0.05));
}

TEST_CASE("algorithms: push-sum conserves mass and its ratio reaches the average on a directed graph") {
  // random_directed: uneven in-degrees, so the weights really move away from 1.
  const std::vector<std::string> sets = {"algorithm.kind=sgp", "gossip.topology=random_directed", "algorithm.degree=3",
                                         "workload.init_values=normal", "run.peers=12"};
  AlgorithmRun start(scn(kAveraging, sets));
  const std::vector<double> mean0 = mean_of(start);
  for (std::uint64_t rounds : {5u, 200u}) {
    auto s2 = sets;
    s2.push_back("workload.steps=" + std::to_string(rounds));
    AlgorithmRun run(scn(kAveraging, s2));
    run.run();
    double wsum = 0, wmin = 1e9, wmax = 0;
    std::vector<double> mass(mean0.size(), 0.0);
    for (std::uint32_t i = 0; i < 12; ++i) {
      const double w = run.push_sum_weight(i);
      wsum += w;
      wmin = std::min(wmin, w);
      wmax = std::max(wmax, w);
      for (std::size_t k = 0; k < mass.size(); ++k) mass[k] += run.push_sum_numerator(i)[k];
    }
    CHECK(std::fabs(wsum - 12) < 1e-12);
    CHECK(wmax - wmin > 0.05);  // not a doubly stochastic walk in disguise
    double err = 0;
    for (std::size_t k = 0; k < mass.size(); ++k) err = std::max(err, std::fabs(mass[k] - 12 * mean0[k]));
    CHECK(err < 1e-12 * 12);
    if (rounds == 200) {
      double worst = 0;
      for (std::uint32_t i = 0; i < 12; ++i)
        for (std::size_t k = 0; k < mean0.size(); ++k) worst = std::max(worst, std::fabs(run.params(i)[k] - mean0[k]));
      CHECK(worst < 1e-6);  // z_i = x_i / w_i: the average (float32 parameters)
    }
  }
}

TEST_CASE("algorithms: the SSP bound on clock gaps holds and is reached, async exceeds it") {
  // Two speeds of worker: the fast ones run into the bound.
  const char* ps = R"(
[run]
peers = 6
[algorithm]
kind = ps_ssp
staleness = 2
[workload]
kind = quadratic
dim = 16
lr = 0.05
steps = 60
[compute]
dist = lognormal
sd = 0.3
[class.fast]
count = 3
step_time = 5ms
[class.slow]
count = 3
step_time = 20ms
[output]
eval_peers = 0
)";
  for (int bound : {0, 2, 5}) {
    AlgorithmRun run(scn(ps, {"algorithm.staleness=" + std::to_string(bound)}));
    run.run();
    CHECK(run.max_clock_gap() <= static_cast<std::uint64_t>(bound + 1));
    CHECK(run.max_clock_gap() == static_cast<std::uint64_t>(bound + 1));
    CHECK(run.rounds() == 6 * 60);
  }
  AlgorithmRun async(scn(ps, {"algorithm.kind=ps_async"}));
  async.run();
  CHECK(async.max_clock_gap() > 20);  // unbounded: the fast ones finish far ahead
}

TEST_CASE("algorithms: DiLoCo with outer lr 1 and no momentum is local SGD exactly") {
  const std::vector<std::string> base = {"workload.optimizer=adam", "workload.lr=0.01", "gossip.local_steps=5"};
  auto l = base, d = base, d2 = base;
  l.push_back("algorithm.kind=local_sgd");
  d.insert(d.end(), {"algorithm.kind=diloco", "algorithm.outer_lr=1", "algorithm.outer_momentum=0", "algorithm.nesterov=off"});
  d2.insert(d2.end(), {"algorithm.kind=diloco"});  // outer lr 0.7, Nesterov 0.9
  AlgorithmRun local(scn(kTrain, l)), dil(scn(kTrain, d)), dil2(scn(kTrain, d2));
  local.run();
  dil.run();
  dil2.run();
  bool same = true;
  for (std::uint32_t i = 0; i < 8; ++i)
    for (std::size_t k = 0; k < local.params(i).size(); ++k) same = same && local.params(i)[k] == dil.params(i)[k];
  CHECK(same);
  // The reported model differs between syncs (DiLoCo's outer model, local SGD's running mean),
  // not after the last one.
  CHECK(local.samples().back().test_acc == dil.samples().back().test_acc);
  CHECK(local.samples().back().loss == dil.samples().back().loss);
  CHECK(max_rel_diff(dil2.params(0), local.params(0)) > 1e-3);  // the outer optimizer does act
}

TEST_CASE("algorithms: ring all-reduce and synchronous server times and bytes follow their formulas") {
  AlgorithmRun run(scn(kTrain, {"algorithm.kind=allreduce"}));
  run.run();
  const double B = static_cast<double>(run.message_bytes());
  CHECK(run.message_bytes() == 32 + 64 + 4 * (64 * 10 + 10));
  const double t_ar = 2.0 * 7 / 8 * B / 1.25e8 + 2.0 * 7 * 1e-3;
  CHECK(run.allreduce_time() == doctest::Approx(t_ar).epsilon(1e-12));
  CHECK(run.now() == doctest::Approx(30 * (0.01 + t_ar)).epsilon(1e-9));
  CHECK(run.totals().bytes == static_cast<std::uint64_t>(30 * 2 * 7 * B));
  // The server: 8 pushes in series through its NIC, a latency, 8 pulls in series, a latency.
  AlgorithmRun ps(scn(kTrain, {"algorithm.kind=ps_sync"}));
  ps.run();
  CHECK(ps.now() == doctest::Approx(30 * (0.01 + 2 * 8 * B / 1.25e8 + 2 * 1e-3)).epsilon(1e-9));
  CHECK(ps.totals().bytes == static_cast<std::uint64_t>(30 * 2 * 8 * B));
  // A slower server NIC is the bottleneck it is.
  AlgorithmRun slow(scn(kTrain, {"algorithm.kind=ps_sync", "algorithm.server_bandwidth=100Mbit"}));
  slow.run();
  CHECK(slow.now() == doctest::Approx(30 * (0.01 + 2 * 8 * B / 1.25e7 + 2 * 1e-3)).epsilon(1e-9));
}

TEST_CASE("algorithms: all-reduce ranks start once loaded, and rank 0's evaluations hold every rank") {
  // As a DDP script on the testbed (bench/testbed_ddp.py): every rank loads for compute.start,
  // rank 0 evaluates before the first step and every eval_every steps (eval_time each), and the
  // next all-reduce waits for it; every rank evaluates once at the end.
  const std::vector<std::string> sets = {"algorithm.kind=allreduce", "compute.start=0.5", "compute.eval_time=0.2",
                                         "output.eval_every=10", "output.peer_evals=on", "output.train_evals=p0"};
  AlgorithmRun run(scn(kTrain, sets));
  run.run();
  const double t_ar = 2.0 * 7 / 8 * static_cast<double>(run.message_bytes()) / 1.25e8 + 2.0 * 7 * 1e-3;
  // start, rank 0's evaluations at steps 0, 10 and 20, 30 rounds, every rank's final one
  CHECK(run.now() == doctest::Approx(0.5 + 3 * 0.2 + 30 * (0.01 + t_ar) + 0.2).epsilon(1e-9));
  std::istringstream in(run.events_csv());
  std::map<std::string, int> evals, done;
  std::vector<double> p0_times;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (f.size() < 7) continue;
    if (f[2] == "eval") ++evals[f[1]];
    if (f[2] == "eval" && f[1] == "p0") p0_times.push_back(std::stod(f[0]));
    if (f[2] == "done" && !f[1].empty()) {
      ++done[f[1]];
      CHECK(f[6].find("test_acc=") == 0);
    }
  }
  CHECK(evals["p0"] == 4);
  CHECK(evals["p3"] == 1);
  CHECK(done.size() == 8);
  REQUIRE(p0_times.size() == 4);
  CHECK(p0_times[0] == doctest::Approx(0.7));  // loaded, then evaluated step 0
  CHECK(p0_times[1] == doctest::Approx(0.7 + 10 * (0.01 + t_ar) + 0.2));
  // The model is the same whatever the clocks: evaluations cost time, not arithmetic.
  AlgorithmRun plain(scn(kTrain, {"algorithm.kind=allreduce"}));
  plain.run();
  CHECK(plain.global_params() == run.global_params());
  CHECK(plain.now() == doctest::Approx(30 * (0.01 + t_ar)).epsilon(1e-9));
  CHECK_THROWS_WITH_AS(scn(kTrain, {"algorithm.kind=ps_async", "output.peer_evals=on"}),
                       doctest::Contains("asynchronous parameter servers"), std::exception);
}

TEST_CASE("algorithms: D-PSGD on the complete graph with uniform weights (ATC) is centralized SGD") {
  AlgorithmRun central(scn(kTrain, {"algorithm.kind=centralized"}));
  AlgorithmRun allreduce(scn(kTrain, {"algorithm.kind=allreduce"}));
  AlgorithmRun ps(scn(kTrain, {"algorithm.kind=ps_sync"}));
  AlgorithmRun atc(scn(kTrain, {"algorithm.kind=dpsgd", "algorithm.combine=atc", "gossip.topology=complete"}));
  AlgorithmRun cta(scn(kTrain, {"algorithm.kind=dpsgd", "algorithm.combine=cta", "gossip.topology=complete"}));
  for (auto* r : {&central, &allreduce, &ps, &atc, &cta}) r->run();
  const std::vector<float> x = central.global_params();
  // Same arithmetic, other clocks: identical models.
  CHECK(allreduce.global_params() == x);
  CHECK(ps.global_params() == x);
  CHECK(central.now() < ps.now());
  // ATC: x_i <- mean_j (x - lr g_j) = x - lr mean_j g_j, up to float rounding.
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(max_rel_diff(atc.params(i), x) < 1e-5);
  CHECK(atc.samples().back().test_acc == doctest::Approx(central.samples().back().test_acc).epsilon(0.01));
  // CTA keeps each peer's own last gradient: it differs.
  CHECK(max_rel_diff(cta.params(0), x) > 1e-4);
}

TEST_CASE("algorithms: scenario errors name the key") {
  const auto err = [](const std::vector<std::string>& sets) {
    try {
      (void)scn(kTrain, sets);
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err({"gossip.topology=onepeer_exp"}).find("gossip.topology") != std::string::npos);  // gossip cannot
  CHECK(err({"algorithm.kind=dpsgd", "churn.crash=p1 at 1"}).find("churn") != std::string::npos);
  CHECK(err({"algorithm.kind=dpsgd", "gossip.topology=onepeer", "algorithm.weights=metropolis"}).find("algorithm.weights") !=
        std::string::npos);
  CHECK(err({"algorithm.kind=dpsgd", "gossip.topology=random_directed"}).find("sgp") != std::string::npos);
  CHECK(err({"algorithm.kind=nope"}).find("algorithm.kind") != std::string::npos);
  // gossip's default H is auto; a round algorithm has no round trips to time: unset, it runs a
  // round per step; asked for, it is refused with the key named.
  CHECK(err({"algorithm.kind=dpsgd", "gossip.local_steps=auto"}).find("gossip.local_steps") != std::string::npos);
  CHECK(scn(kTrain, {"algorithm.kind=dpsgd"}).loop.gossip.local_steps == 1);
  CHECK(scn(kTrain, {}).loop.gossip.local_steps == 0);
  CHECK(err({"workload.partition=labels:0"}).find("workload.partition") != std::string::npos);
  CHECK(err({"sweep.nosuchkey=1,2"}).find("sweep.nosuchkey") != std::string::npos);
  CHECK(err({"sweep.peers=4,"}).find("empty value") != std::string::npos);
  CHECK(err({"sweep.algorithm=sgp+nokey=1"}).find("nokey") != std::string::npos);
  CHECK(err({"sweep.algorithm=sgp+topology"}).find("VALUE+KEY=V") != std::string::npos);
  CHECK(err({}).empty());
}

TEST_CASE("algorithms: a sweep runs its grid in parallel and is deterministic") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rumor_sweep_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "grid.ini").string();
  {
    std::ofstream f(file);
    f << kTrain << "\n[sweep]\nalgorithm = dpsgd+topology=ring+combine=atc,allreduce,ps_async\nseeds = 1,2\ntarget = 0.5\n";
  }
  const Scenario base = load_scenario(file, {});
  const auto runs = expand_sweep(file, base, {});
  REQUIRE(runs.size() == 6);
  CHECK(runs[1].scenario.seed == 2);
  CHECK(runs[2].scenario.algorithm == Algorithm::AllReduce);
  // A variant's extra assignments: dpsgd on the ring with ATC.
  CHECK(runs[0].scenario.algorithm == Algorithm::Dpsgd);
  CHECK(runs[0].scenario.topology == Topology::Ring);
  CHECK(runs[0].scenario.atc);
  CHECK(runs[2].scenario.topology == Topology::Complete);
  const auto slurp = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::vector<std::string> csv, summary;
  for (const std::string par : {"2", "1", "2"}) {
    const Scenario b = load_scenario(file, {"sweep.parallel=" + par});
    const fs::path out = dir / ("out" + std::to_string(csv.size()));
    const std::string md = run_sweep(b, expand_sweep(file, b, {}), out.string());
    CHECK(md.find("dpsgd") != std::string::npos);
    csv.push_back(slurp(out / "sweep.csv"));
    summary.push_back(slurp(out / "summary.csv"));
    CHECK(fs::exists(out / "runs" / "005" / "timeseries.csv"));
  }
  CHECK(csv[0] == csv[1]);
  CHECK(csv[0] == csv[2]);
  CHECK(summary[0] == summary[1]);
  // The summary has one row per algorithm (seeds pooled), each with 2 runs.
  CHECK(std::count(summary[0].begin(), summary[0].end(), '\n') == 4);
  CHECK(summary[0].find("dpsgd+topology=ring+combine=atc,2,") != std::string::npos);
  // Another seed gives other rows.
  const auto rows_of = [&](const std::string& run) {
    std::string o;
    std::istringstream in(csv[0]);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(run + ",", 0) != 0) continue;
      std::size_t at = 0;
      for (int f = 0; f < 3; ++f) at = line.find(',', at) + 1;  // past run, algorithm, seed
      o += line.substr(at) + "\n";
    }
    return o;
  };
  CHECK(rows_of("000") != rows_of("001"));
  // A bad combination stops the sweep before anything runs.
  {
    std::ofstream f(file, std::ios::app);
    f << "topology = ring,hypercube\npeers = 6\n";
  }
  CHECK_THROWS_AS(expand_sweep(file, load_scenario(file, {}), {}), ScenarioError);
  fs::remove_all(dir);
}
