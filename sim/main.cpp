// rumor-sim: run a scenario file in virtual time and write its outputs (docs/sim.md).
//
//   rumor-sim SCENARIO [--seed S] [--out DIR] [--set section.key=value ...] [--plot]
//   rumor-sim --calibrate [--procs N] [--calibrate-out FILE] [--data DIR] [--calibrate-model SPEC]
//   rumor-sim --campaign N [--seed S] [-j J] [--stop-at-first]    (docs/testing.md)
//   rumor-sim --replay SEED [--out DIR]
//
// Exit codes: 0 done, 2 bad usage or a bad scenario (the message names the place and key),
// 3 a broken invariant (a campaign's failing seed, a replay, or a scenario with
// `[invariants] check = on`), 1 anything else. Everything written under DIR is a pure function of the scenario and the
// seed; the one line about wall time and memory goes to stderr only.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "core/model.hpp"
#include "data/dataset.hpp"
#include "sim/campaign.hpp"
#include "sim/invariants.hpp"
#include "sim/peer_flags.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "tools/calibrate.hpp"

#ifndef RUMOR_SOURCE_DIR
#define RUMOR_SOURCE_DIR ""
#endif

namespace {

namespace fs = std::filesystem;

// examples/sim/plot.py: next to the source tree this binary was built from, or found from
// the executable (build/sim/rumor-sim -> ../../examples/sim/plot.py).
std::string find_plot_script(const char* argv0, const std::string& name) {
  std::vector<fs::path> candidates;
  if (std::string(RUMOR_SOURCE_DIR).size()) candidates.push_back(fs::path(RUMOR_SOURCE_DIR) / "examples/sim" / name);
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  const fs::path base = ec ? fs::path(argv0).parent_path() : exe.parent_path();
  for (fs::path d = base; !d.empty() && d != d.parent_path(); d = d.parent_path())
    candidates.push_back(d / "examples/sim" / name);
  for (const auto& c : candidates)
    if (fs::exists(c, ec)) return c.string();
  return {};
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// Thousands of simulated peers are gigabytes of heap, first touched one 4 KiB page at a time:
// at 10,000 peers of scale.ini, 4 of 70 CPU seconds went to page faults, and more to TLB
// misses. glibc can grow its heap in large steps marked for transparent huge pages, but reads
// that setting (GLIBC_TUNABLES) only when a program starts, so rumor-sim re-executes itself
// once with it. The heap's layout within its pages is unchanged, and so are the outputs.
// RUMOR_SIM_HUGE_PAGES=0 turns this off; the machine's THP mode must allow madvise. Not for
// --calibrate (see main).
constexpr const char* kTunedMark = "RUMOR_SIM_HUGE_PAGES";
constexpr const char* kTunablesWere = "RUMOR_SIM_GLIBC_TUNABLES_WERE";

// Puts GLIBC_TUNABLES back as the user gave it (`was`: its value, or nullptr/"" if unset) and
// drops our marks.
void restore_tunables(const char* was) {
  if (was && *was)
    setenv("GLIBC_TUNABLES", was, 1);
  else
    unsetenv("GLIBC_TUNABLES");
  unsetenv(kTunablesWere);
  unsetenv(kTunedMark);
}

void use_huge_pages(char** argv) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // the sanitizers' allocators are not glibc's
#endif
  // Under valgrind (its preload) a re-executed process would run outside it.
  if (const char* pre = std::getenv("LD_PRELOAD"); pre && std::string(pre).find("vgpreload") != std::string::npos) return;
  if (const char* mark = std::getenv(kTunedMark)) {
    // Started again with the setting: the processes we start (--plot's python, the testbed's
    // tools) get the environment the user gave us. "0" (or anything else): off.
    if (std::string(mark) == "re-executed") restore_tunables(std::getenv(kTunablesWere));
    return;
  }
  const char* was = std::getenv("GLIBC_TUNABLES");
  const std::string user = was ? was : "";
  setenv(kTunablesWere, user.c_str(), 1);
  setenv("GLIBC_TUNABLES", ((user.empty() ? "" : user + ":") + "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864").c_str(), 1);
  setenv(kTunedMark, "re-executed", 1);
  execv("/proc/self/exe", argv);
  restore_tunables(user.c_str());  // could not: go on as we are
}

}  // namespace

int main(int argc, char** argv) {
  // --calibrate measures what rumor-peer sees (loading the data set with 4 KiB pages: 1.45 s
  // here, against 0.61 s with huge pages), so it runs as started.
  if (std::none_of(argv + 1, argv + argc, [](const char* a) { return std::string_view(a) == "--calibrate"; }))
    use_huge_pages(argv);
  CLI::App app{"rumor-sim: the deterministic discrete-event simulator of Rumor (docs/sim.md)."};
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return std::string("rumor-sim: ") + e.what() + "\nUsage: " + a->get_name() +
           " SCENARIO [--seed S] [--out DIR] [--set key=value ...] [--plot]   (--help for more)\n";
  });
  std::string scenario_path, out_dir = "out/sim", calib_out, data = "/usr/share/datasets/fashion-mnist";
  std::vector<std::string> sets;
  std::uint64_t seed = 0;
  bool plot = false, calibrate = false;
  int procs = 4;
  auto* o_scn = app.add_option("scenario", scenario_path, "Scenario file (docs/sim.md; examples under examples/sim/)");
  auto* o_seed = app.add_option("--seed", seed, "Seed of every random choice (overrides run.seed)");
  app.add_option("--out", out_dir, "Output directory (timeseries.csv, events.csv, summary.json)")->capture_default_str();
  app.add_option("--set", sets, "Override a scenario key: section.key=value (repeatable; list keys append)")
      ->allow_extra_args(false);
  app.add_flag("--plot", plot, "Also write accuracy.png, loss.png and consensus.png (python3 + matplotlib)");
  app.add_flag("--calibrate", calibrate,
               "Measure this machine (step time of the quickstart model with --procs concurrent processes, "
               "exchange CPU, evaluation time, loopback TCP bandwidth and latency) and write a scenario fragment");
  app.add_option("--procs", procs, "--calibrate: concurrent training processes (the quickstart runs 4)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--calibrate-out", calib_out, "--calibrate: write the fragment here (default: stdout)");
  app.add_option("--data", data, "--calibrate: data directory")->capture_default_str();
  std::string calib_model = rumor::sim::CalibrationConfig{}.model;
  auto* o_cmodel = app.add_option("--calibrate-model", calib_model,
                                  "--calibrate: the model whose step and evaluation are timed, in rumor-peer's --model "
                                  "grammar (a scenario's workload.model, e.g. cnn:c16k3p1,p2,c32k3p1,p2,f128)")
                       ->capture_default_str();
  std::string peer_flags_of;
  app.add_option("--peer-flags", peer_flags_of,
                 "Print the rumor-peer flags that run peer K of the scenario for real (K, or `all`: one line per "
                 "founder), and exit; examples/quickstart.sh starts its peers so");
  bool testbed_plan = false;
  app.add_flag("--testbed-plan", testbed_plan,
               "Print the testbed's plan of the scenario as JSON (every founder's class, bandwidth, CPU share, "
               "bandwidth changes and rumor-peer flags), and exit; examples/testbed/run.sh builds its network from it");
  std::uint64_t campaign = 0, replay = 0;
  unsigned jobs = 1;
  bool stop_at_first = false;
  std::string mutation;
  auto* o_campaign = app.add_option("--campaign", campaign,
                                    "Fault campaign: N random scenarios with faults, seeds S..S+N-1 (--seed S, default 1), "
                                    "each under the invariant checker (docs/testing.md); exit 3 if any seed fails");
  auto* o_replay = app.add_option("--replay", replay,
                                  "Rerun campaign seed SEED exactly: writes its scenario.ini and outputs (events.csv logs "
                                  "every exchange and view change) into --out, prints the first broken invariant");
  app.add_option("-j,--jobs", jobs, "--campaign: seeds run on this many threads")->check(CLI::Range(1, 256));
  app.add_flag("--stop-at-first", stop_at_first, "--campaign: stop at the first failing seed");
  app.add_option("--mutation", mutation, "--campaign/--replay: a test-only mutation (docs/testing.md): skip_overlap, "
                                         "mix_nonfinite, keep_dead, endless_wait");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  rumor::set_math_threads(1);

  if (o_campaign->count()) {
    rumor::sim::CampaignOptions co;
    co.runs = campaign;
    co.seed = o_seed->count() ? seed : 1;
    co.jobs = jobs;
    co.stop_at_first = stop_at_first;
    co.mutation = mutation;
    co.progress_every = std::max<std::uint64_t>(1, std::min<std::uint64_t>(500, campaign / 10));
    const auto t0 = std::chrono::steady_clock::now();
    co.on_failure = [](const rumor::sim::CampaignRun& r) { fmt::print("FAIL {}\n", r.line()); std::fflush(stdout); };
    co.on_progress = [&](std::uint64_t done, std::uint64_t failures) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "rumor-sim: campaign {}/{} seeds, {} failing, {:.1f} s wall\n", done, campaign, failures, el);
    };
    const auto r = rumor::sim::run_campaign(co);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}", r.summary());
    fmt::print("wall {:.1f} s on {} thread(s); replay a seed: rumor-sim --replay SEED --out DIR{}\n", wall, jobs,
               mutation.empty() ? "" : " --mutation " + mutation);
    return r.failures ? 3 : 0;
  }
  if (o_replay->count()) {
    const auto r = rumor::sim::run_campaign_seed(replay, mutation, out_dir);
    fmt::print("{}\n", r.line());
    fmt::print("{} events, {:.3f} s virtual; scenario.ini and outputs in {}\n", r.events, r.virtual_time, out_dir);
    if (!r.error.empty()) return 1;
    return r.failed() ? 3 : 0;
  }

  if (o_cmodel->count() && !calibrate) {
    std::cerr << "rumor-sim: --calibrate-model only applies to --calibrate (a scenario's model is its workload.model)\n";
    return 2;
  }
  if (calibrate) {
    try {
      // A bad spec is refused before anything is measured (Fashion-MNIST's 784 inputs, 10 classes).
      rumor::make_model(calib_model, 784, 10);
    } catch (const std::exception& e) {
      std::cerr << "rumor-sim: --calibrate-model '" << calib_model << "': " << e.what() << "\n";
      return 2;
    }
    try {
      rumor::sim::CalibrationConfig cc;
      cc.procs = procs;
      cc.data = data;
      cc.model = calib_model;
      const auto r = rumor::sim::calibrate(cc, std::cerr);
      const std::string text = rumor::sim::calibration_fragment(r, cc);
      if (calib_out.empty()) {
        std::cout << text;
      } else {
        std::FILE* f = std::fopen(calib_out.c_str(), "w");
        if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0) {
          std::cerr << "rumor-sim: cannot write " << calib_out << "\n";
          return 1;
        }
        std::cerr << "rumor-sim: wrote " << calib_out << "\n";
      }
      return 0;
    } catch (const rumor::DataError& e) {
      std::cerr << "rumor-sim: " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "rumor-sim: calibration failed: " << e.what() << "\n";
      return 1;
    }
  }
  if (scenario_path.empty()) {
    std::cerr << "rumor-sim: a scenario file is required (examples under examples/sim/)\n";
    return 2;
  }
  if (o_seed->count()) sets.push_back("run.seed=" + std::to_string(seed));
  (void)o_scn;

  const auto t0 = std::chrono::steady_clock::now();
  bool swept = false, invariant_broken = false;
  try {
    const rumor::sim::Scenario s = rumor::sim::load_scenario(scenario_path, sets);
    if (testbed_plan) {
      std::cout << rumor::sim::testbed_plan(s);
      return 0;
    }
    if (!peer_flags_of.empty()) {
      std::uint32_t first = 1, last = s.founders;
      if (peer_flags_of != "all") {
        try {
          first = last = static_cast<std::uint32_t>(std::stoul(peer_flags_of));
        } catch (const std::exception&) {
          throw rumor::sim::ScenarioError("--peer-flags '" + peer_flags_of + "': expected a peer number K or all");
        }
      }
      for (std::uint32_t k = first; k <= last; ++k) {
        const auto flags = rumor::sim::peer_flags(s, k);
        for (const auto& f : flags)
          if (f.empty() || f.find_first_of(" \t\n'\"") != std::string::npos)
            throw rumor::sim::ScenarioError("--peer-flags: '" + f + "' would not survive the shell's word splitting");
        fmt::print("{}\n", fmt::join(flags, " "));
      }
      return 0;
    }
    if (!s.sweep.empty()) {
      // A grid: every combination checked first, then run `sweep.parallel` at a time.
      swept = true;
      const auto runs = rumor::sim::expand_sweep(scenario_path, s, sets);
      fmt::print(stderr, "rumor-sim: sweep of {} runs, {} at a time, into {}\n", runs.size(), s.sweep_parallel, out_dir);
      std::size_t done = 0;
      const std::string md = rumor::sim::run_sweep(s, runs, out_dir, [&](const rumor::sim::SweepRun& r, const rumor::sim::RunOutcome& o) {
        ++done;
        std::string label;
        for (std::size_t a = 0; a < s.sweep.size(); ++a) label += " " + s.sweep[a].label + "=" + r.values[a];
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print(stderr, "rumor-sim: [{}/{}] run {}:{}: final test_acc {:.4f} at {:.2f} s virtual ({:.0f} s wall so far)\n",
                   done, runs.size(), r.name, label, o.samples.empty() ? 0.0 : o.samples.back().test_acc, o.virtual_time,
                   el);
      });
      std::cout << md;
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "rumor-sim: sweep done, wall {:.1f} s; sweep.csv, runs.csv, summary.csv, summary.md in {}\n", wall,
                 out_dir);
    } else {
      // A long run says how far it has got: a line every 10 s of wall time (nothing for the
      // usual runs of a few seconds).
      auto last_line = t0;
      const auto progress = [&](const rumor::sim::Simulation& sim) {
        const auto t = std::chrono::steady_clock::now();
        if (t - last_line < std::chrono::seconds(10)) return;
        last_line = t;
        const double el = std::chrono::duration<double>(t - t0).count();
        const auto events = sim.totals().events;
        fmt::print(stderr, "rumor-sim: {:.1f} s virtual, {} events, {} exchanges, {:.0f} s wall ({:.0f} events/s)\n",
                   sim.now(), events, sim.totals().exchanges, el, static_cast<double>(events) / el);
      };
      const rumor::sim::RunOutcome o = rumor::sim::run_scenario(s, out_dir, progress);
      if (!o.invariant.empty()) {
        fmt::print(stderr, "rumor-sim: broken invariant: {}\n", o.invariant);
        invariant_broken = true;
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rusage ru{};
      getrusage(RUSAGE_SELF, &ru);
      fmt::print(stderr,
                 "rumor-sim: {} events, {:.3f} s virtual, final test_acc {:.4f}; wall {:.2f} s, "
                 "{:.0f} events/s, peak RSS {:.1f} MB; outputs in {}\n",
                 o.totals.events, o.virtual_time, o.samples.empty() ? 0.0 : o.samples.back().test_acc, wall,
                 wall > 0 ? static_cast<double>(o.totals.events) / wall : 0.0, static_cast<double>(ru.ru_maxrss) / 1024.0,
                 out_dir);
    }
  } catch (const rumor::sim::ScenarioError& e) {
    std::cerr << "rumor-sim: " << e.what() << "\n";
    return 2;
  } catch (const rumor::DataError& e) {
    std::cerr << "rumor-sim: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "rumor-sim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "rumor-sim: " << e.what() << "\n";
    return 1;
  }

  if (plot) {
    // A sweep's comparison plots come from sweep_plot.py, a single run's from plot.py.
    const std::string script = find_plot_script(argv[0], swept ? "sweep_plot.py" : "plot.py");
    std::error_code ec;
    if (!fs::exists("/usr/bin/python3", ec)) {
      std::cerr << "rumor-sim: --plot needs /usr/bin/python3 with matplotlib; the CSV files are written\n";
    } else if (script.empty()) {
      std::cerr << "rumor-sim: --plot: the plot script (examples/sim/) was not found; the CSV files are written\n";
    } else {
      const std::string cmd = "/usr/bin/python3 " + shell_quote(script) + " " + shell_quote(out_dir);
      if (std::system(cmd.c_str()) != 0)
        std::cerr << "rumor-sim: --plot: the plot script failed (is python3-matplotlib installed?); the CSV files are written\n";
    }
  }
  return invariant_broken ? 3 : 0;
}
