// Fault campaigns (campaign.hpp): the scenario a seed draws, one seed's run under the
// checker, and many seeds on a few threads (each Simulation is independent and single-threaded).
#include "sim/campaign.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/model.hpp"
#include "core/rng.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

namespace rumor::sim {

namespace {
constexpr std::uint64_t kCampaignStream = (1ull << 41) + 100;  // apart from sim/streams.hpp's

// The one-line summary is the INI's first comment line.
std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  std::string l = text.substr(0, nl);
  return l.size() > 2 ? l.substr(2) : l;
}
}  // namespace

std::string campaign_scenario(std::uint64_t seed, const std::string& mutation) {
  Rng r = Rng(seed).fork(kCampaignStream);
  const auto pick = [&](std::initializer_list<const char*> xs) { return *(xs.begin() + r.below(xs.size())); };
  const auto chance = [&](double p) { return r.uniform() < p; };
  // Peers: 2 to 64, most runs small (u^3).
  // One run in five is long (a few peers for thousands of steps), so that the bounds of
  // failure detection and of healing (tens of seconds) pass within it.
  const bool long_run = chance(0.2);
  const double u = r.uniform();
  const std::uint32_t peers = long_run ? 3 + static_cast<std::uint32_t>(r.below(6))
                                       : 2 + static_cast<std::uint32_t>(std::floor(62.999 * u * u * u));
  // A third of the runs keep the sum of the parameters (training off, codec none, uniform
  // weights, no churn, only faults that lose nothing): the conservation invariant is on there.
  const bool conserving = chance(0.35);
  const bool training = !conserving && chance(0.5);
  const std::uint32_t dim = 4 + static_cast<std::uint32_t>(r.below(29));
  // Fewer steps for many peers: a campaign covers many seeds rather than long runs.
  const std::uint32_t steps = long_run ? 1000 + static_cast<std::uint32_t>(r.below(1500))
                                       : std::max<std::uint32_t>(8, static_cast<std::uint32_t>((20 + r.below(61)) *
                                                                                             std::min(1.0, 12.0 / static_cast<double>(peers))));
  const std::uint32_t H = 1 + static_cast<std::uint32_t>(r.below(4));
  const bool bounded = chance(0.6);
  // Lockstep (TAU 0) in a large swarm is a poll-heavy run: kept to small swarms.
  const std::uint32_t tau = static_cast<std::uint32_t>(r.below(5)) + (peers > 16 ? 1 : 0);
  const char* codec = conserving || chance(0.6) ? "none" : pick({"fp16", "int8", "topk"});
  const char* weight = conserving || chance(0.7) ? "uniform" : "samples";
  const std::uint32_t in_flight = 1 + static_cast<std::uint32_t>(r.below(2));
  const bool stream = chance(0.7);
  const double step_ms = 5 + 15 * r.uniform();
  const char* dist = pick({"constant", "exponential", "normal"});
  const double latency_ms = 1 + 19 * r.uniform();
  const double jitter_ms = chance(0.5) ? 5 * r.uniform() : 0;
  const char* bootstrap = conserving || chance(0.6) ? "all" : "seed";
  const double settle = chance(0.5) ? 0 : 0.5 * r.uniform();
  const double probe_interval = 0.2 + 0.3 * r.uniform();
  const double suspect_timeout = 0.5 + 2 * r.uniform();
  const double exchange_timeout = 1 + 2 * r.uniform();
  const double run_s = steps * step_ms / 1000.0 * (1 + 0.5 * H);
  std::string churn;
  std::uint32_t churn_n = 0;
  if (!conserving && peers > 2 && chance(0.35)) {
    const std::uint32_t k = 1 + static_cast<std::uint32_t>(r.below(3));
    for (std::uint32_t i = 0; i < k; ++i) {
      const char* kind = pick({"crash", "leave", "join"});
      const double at = run_s * r.uniform(0.1, 0.8);
      if (std::string(kind) == "join") churn += fmt::format("join = 1 at {:.4f}\n", at);
      else churn += fmt::format("{} = random at {:.4f}\n", kind, at);
      ++churn_n;
    }
  }
  // Faults: each point on with probability 1/4, at a level drawn for it.
  std::string faults, on;
  const auto level = [&](double lo, double hi) { return lo * std::pow(hi / lo, r.uniform()); };
  for (std::size_t k = 0; k < kFaultPoints; ++k) {
    const auto f = static_cast<FaultPoint>(k);
    const bool keeps_sum = f == FaultPoint::Duplicate || f == FaultPoint::Slow || f == FaultPoint::ClockSkew;
    if (!chance(conserving ? (keeps_sum ? 0.4 : 0.0) : 0.25)) continue;
    double x = 0;
    switch (f) {
      case FaultPoint::Drop: case FaultPoint::Delay: case FaultPoint::Duplicate: case FaultPoint::Reorder:
      case FaultPoint::ConnectFail: x = level(0.002, 0.05); break;
      case FaultPoint::Truncate: case FaultPoint::Corrupt: x = level(0.001, 0.02); break;
      case FaultPoint::Stall: x = level(0.001, 0.02); break;
      case FaultPoint::CrashMidExchange: x = level(0.0002, 0.002); break;
      case FaultPoint::CrashMidTransfer: case FaultPoint::CrashMidLeave: x = level(0.01, 0.3); break;
      case FaultPoint::Restart: x = level(0.3, 1.0); break;
      case FaultPoint::Partition: x = long_run ? level(0.02, 0.2) : level(0.3, 3); break;
      case FaultPoint::Slow: case FaultPoint::ClockSkew: x = level(0.1, 0.5); break;
      case FaultPoint::Count: break;
    }
    faults += fmt::format("{} = {:.6g}\n", fault_name(f), x);
    on += std::string(on.empty() ? "" : ",") + fault_name(f);
  }
  if (!faults.empty()) {
    faults += fmt::format("stall_max = {:.4f}\n", 0.05 + 1.0 * r.uniform());
    faults += fmt::format("partition_max = {:.4f}\n", long_run ? 2 + 6 * r.uniform() : 0.3 + 1.2 * r.uniform());
    faults += fmt::format("restart_after = {:.4f}\n", 0.2 + 1.0 * r.uniform());
  }
  if (!mutation.empty()) faults += "mutation = " + mutation + "\n";
  // The knobs of the compression issue, drawn from a stream of their own so that every draw
  // above, and so the scenarios of seeds without them, stays what it was: int4 in place of a
  // third of the other codecs, fragments in a quarter of the runs (not with topk), outer
  // momentum in a fifth. None keeps the sum of the parameters: off in conserving runs.
  Rng r2 = Rng(seed).fork(kCampaignStream + 1);
  std::uint32_t fragments = 1;
  double outer_lr = 0, outer_momentum = 0;
  if (!conserving) {
    if (std::string(codec) != "none" && r2.uniform() < 0.35) codec = "int4";
    if (std::string(codec) != "topk" && r2.uniform() < 0.25) fragments = 2 + static_cast<std::uint32_t>(r2.below(3));
    if (r2.uniform() < 0.2) {
      outer_lr = 0.5 + 0.5 * r2.uniform();
      outer_momentum = 0.5 + 0.4 * r2.uniform();
    }
  }
  std::string extra;
  if (fragments > 1) extra += fmt::format(" fragments={}", fragments);
  if (outer_momentum > 0) extra += fmt::format(" outer={:.3f}/{:.3f}", outer_lr, outer_momentum);
  const std::string tau_text = bounded ? std::to_string(tau) : std::string("inf");
  std::string t = fmt::format(
      "# seed {}: {}peers={} training={} H={} tau={} codec={}{} weight={} in_flight={} stream={} bootstrap={} churn={} faults={}{}\n",
      seed, long_run ? "long " : "", peers, training ? "on" : "off", H, tau_text, codec, extra, weight, in_flight, stream ? "on" : "off", bootstrap,
      churn_n, on.empty() ? "none" : on, mutation.empty() ? "" : " mutation=" + mutation);
  t += "# drawn by rumor-sim --campaign (sim/campaign.cpp); rerun: rumor-sim THIS_FILE\n";
  t += fmt::format("[run]\npeers = {}\nseed = {}\nsettle = {:.4f}\nsettle_max = 5\n", peers, seed, settle);
  t += fmt::format("[workload]\nkind = quadratic\ntraining = {}\ndim = {}\nsteps = {}\n", training ? "on" : "off", dim, steps);
  if (training) t += "optimizer = sgd\nlr = 0.02\nnoise = 0.5\n";
  else t += "init_mean = 1\ninit_sd = 1\n";
  t += fmt::format("[compute]\nstep_time = {:.4f}ms\ndist = {}\n", step_ms, dist);
  t += fmt::format("[network]\nlatency = {:.4f}ms\njitter = {:.4f}ms\n", latency_ms, jitter_ms);
  t += fmt::format("[gossip]\nbootstrap = {}\nlocal_steps = {}\ncodec = {}\nmix_weight = {}\nmax_in_flight = {}\n"
                   "stream_exchanges = {}\nprobe_interval = {:.4f}\nsuspect_timeout = {:.4f}\nexchange_timeout = {:.4f}\n",
                   bootstrap, H, codec, weight, in_flight, stream ? "on" : "off", probe_interval, suspect_timeout, exchange_timeout);
  if (bounded) t += fmt::format("staleness = {}\n", tau);
  if (fragments > 1) t += fmt::format("fragments = {}\n", fragments);
  if (outer_momentum > 0) t += fmt::format("outer_lr = {:.4f}\nouter_momentum = {:.4f}\n", outer_lr, outer_momentum);
  if (!churn.empty()) t += "[churn]\n" + churn;
  if (!faults.empty()) t += "[faults]\n" + faults;
  t += "[invariants]\ncheck = on\n";
  t += "[output]\nsample_every = 1000\neval_peers = 0\n";
  return t;
}

std::string CampaignRun::line() const {
  if (!error.empty()) return fmt::format("seed {}: {}: error: {}", seed, scenario, error);
  return fmt::format("seed {}: {}: {}", seed, scenario, first ? first->line() : std::string("clean"));
}

CampaignRun run_campaign_seed(std::uint64_t seed, const std::string& mutation, const std::string& out_dir) {
  CampaignRun run;
  run.seed = seed;
  std::string text = campaign_scenario(seed, mutation);
  run.scenario = first_line(text);
  if (!out_dir.empty()) text += "log_exchanges = on\nlog_views = on\n";  // the event log; the run is the same
  try {
    if (!out_dir.empty()) {  // first: a seed that never ends can still be looked at
      std::filesystem::create_directories(out_dir);
      std::ofstream(out_dir + "/scenario.ini") << text;
    }
    const Scenario s = parse_scenario(text, fmt::format("campaign-seed-{}.ini", seed), {});
    Simulation sim(s);
    sim.check_invariants();
    const InvariantChecker& c = *sim.invariants();
    const bool replay = !out_dir.empty();
    // A campaign run stops at its first broken invariant; a replay runs on (its log shows what
    // followed), up to the run bound either way.
    while ((replay || c.ok()) && sim.now() <= c.run_bound() && sim.step()) {
    }
    run.first = c.first();
    run.events = c.counts().events;
    run.virtual_time = sim.now();
    run.faults = sim.fault_counts();
    if (replay) sim.write_outputs(out_dir);
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  return run;
}

std::string CampaignResult::summary() const {
  std::string s = fmt::format("campaign: {} runs, {} events checked, {} failing\n", runs, events, failures);
  s += "faults fired:";
  for (std::size_t k = 0; k < kFaultPoints; ++k) s += fmt::format(" {}={}", fault_name(static_cast<FaultPoint>(k)), faults[k]);
  return s + "\n";
}

CampaignResult run_campaign(const CampaignOptions& o) {
  if (math_threads() != 1) set_math_threads(1);  // before any thread starts (Simulation checks it)
  std::vector<CampaignRun> runs(o.runs);
  std::atomic<std::uint64_t> next{0}, done{0}, failures{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  const auto worker = [&] {
    for (;;) {
      if (stop) return;
      const std::uint64_t k = next++;
      if (k >= o.runs) return;
      runs[k] = run_campaign_seed(o.seed + k, o.mutation);
      const bool bad = runs[k].failed();
      const std::uint64_t f = failures += bad ? 1 : 0;
      const std::uint64_t d = ++done;
      std::lock_guard<std::mutex> lock(mu);
      if (bad) {
        if (o.on_failure) o.on_failure(runs[k]);
        if (o.stop_at_first) stop = true;
      }
      if (o.on_progress && o.progress_every && d % o.progress_every == 0) o.on_progress(d, f);
    }
  };
  const unsigned jobs = std::max(1u, o.jobs);
  std::vector<std::thread> pool;
  for (unsigned j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  CampaignResult r;
  for (const CampaignRun& run : runs) {
    if (run.seed == 0 && run.events == 0 && run.scenario.empty()) continue;  // not run (stopped at the first)
    ++r.runs;
    r.events += run.events;
    for (std::size_t k = 0; k < kFaultPoints; ++k) r.faults[k] += run.faults[k];
    if (run.failed()) {
      ++r.failures;
      r.failed.push_back(run);
    }
  }
  return r;
}

}  // namespace rumor::sim
