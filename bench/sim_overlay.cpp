// The partial views' properties at sizes too large for a test (bench/overlay_properties.sh;
// docs/sim.md "Partial views"): pure averaging (training off, a 16-float model, exponential
// ticks of 1 s, latency 1 ms), joining through p0, view partial.
//
//   bench_sim_overlay connectivity N SEED MINUTES  churn of 1% of N per second (crashes and
//       joins at once) for MINUTES of virtual time after 10 s; the overlay of the live peers
//       sampled every second: prints the samples and how many were not connected.
//   bench_sim_overlay detection N SEED             20 random peers crash at t = 20 s: prints
//       each one's time until no live active view holds it (sampled every 0.1 s), and the p99.
//   bench_sim_overlay averaging N SEED SECONDS     runs SECONDS of virtual time: events,
//       exchanges, and the overlay at the end.
// Every mode ends with "cpu_s ... rss_mb ..." (getrusage: the whole process).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

#include "sim/overlay.hpp"
#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

using namespace rumor;
using namespace rumor::sim;

namespace {

std::string scenario(long n, long seed, double duration, const std::string& extra) {
  return "[run]\npeers = " + std::to_string(n) + "\nseed = " + std::to_string(seed) +
         "\nduration = " + std::to_string(duration) +
         "\nsettle = 0\n[workload]\nkind = quadratic\ntraining = off\ndim = 16\ninit_mean = 1\ninit_sd = 1\n"
         "[gossip]\nbootstrap = seed\nview = partial\n[compute]\nstep_time = 1\ndist = exponential\n"
         "[network]\nlatency = 1ms\n[output]\nsample_every = 10\n" + extra;
}

void usage() {
  std::fprintf(stderr, "usage: bench_sim_overlay connectivity|detection|averaging N SEED [MINUTES|SECONDS]\n");
  std::exit(2);
}

void resources() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const double cpu = u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
  std::printf("cpu_s %.1f rss_mb %.0f\n", cpu, u.ru_maxrss / 1024.0);
}

void graph_line(const char* what, double t, const OverlayGraph& g) {
  std::printf("%s t %.1f live %zu components %zu largest %zu mean_active %.2f max_active %zu max_passive %zu "
              "max_members %zu\n",
              what, t, g.live, g.components, g.largest, g.mean_active, g.max_active, g.max_passive, g.max_members);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) usage();
  const std::string mode = argv[1];
  const long n = std::atol(argv[2]), seed = std::atol(argv[3]);
  const double arg = argc > 4 ? std::atof(argv[4]) : 0;
  if (n < 2) usage();
  if (mode == "connectivity") {
    const double churn = arg > 0 ? arg * 60 : 600;
    const double rate = n / 100.0;
    Simulation sim(parse_scenario(scenario(n, seed, 10 + churn + 5,
                                           "[churn]\ncrash_rate = " + std::to_string(rate) + "\njoin_rate = " +
                                               std::to_string(rate) + "\nfrom = 10\nuntil = " + std::to_string(10 + churn) + "\n"),
                                  "bench.ini", {}));
    std::size_t samples = 0, split = 0;
    OverlayGraph worst;
    for (double t = 10; t <= 10 + churn + 5; t += 1) {
      sim.run_until(t);
      const OverlayGraph g = overlay_graph(sim);
      ++samples;
      if (!g.connected()) {
        ++split;
        graph_line("split", t, g);
      }
      if (g.components >= worst.components) worst = g;
    }
    std::printf("connectivity n %ld seed %ld samples %zu not_connected %zu crashes %llu joins %llu events %llu\n", n, seed,
                samples, split, (unsigned long long)sim.totals().crashes, (unsigned long long)sim.totals().joins,
                (unsigned long long)sim.totals().events);
    graph_line("last", sim.now(), overlay_graph(sim));
  } else if (mode == "detection") {
    std::string crashes = "[churn]\n";
    for (int i = 0; i < 20; ++i) crashes += "crash = random at 20\n";
    Simulation sim(parse_scenario(scenario(n, seed, 60, crashes), "bench.ini", {}));
    sim.run_until(20.0001);
    std::unordered_set<PeerId> held;
    std::vector<std::uint32_t> victims;
    for (std::uint32_t i = 0; i < sim.ids(); ++i)
      if (sim.state(i) == PeerState::Crashed) victims.push_back(i);
    std::vector<double> gone(victims.size(), -1);
    for (double t = 20.1; t <= 60; t += 0.1) {
      sim.run_until(t);
      held.clear();
      for (std::uint32_t i = 0; i < sim.ids(); ++i)
        if (const Gossip* g = sim.gossip(i); g && g->overlay())
          for (const PeerId& id : g->overlay()->active()) held.insert(id);
      std::size_t left = 0;
      for (std::size_t k = 0; k < victims.size(); ++k) {
        if (gone[k] < 0 && !held.count("p" + std::to_string(victims[k]))) gone[k] = t - 20;
        left += gone[k] < 0;
      }
      if (left == 0) break;
    }
    std::sort(gone.begin(), gone.end());
    std::printf("detection n %ld seed %ld victims %zu", n, seed, gone.size());
    for (double x : gone) std::printf(" %.1f", x);
    // p99 of 20 values: the largest (nearest rank).
    std::printf("\ndetection_p99_s %.1f median_s %.1f\n", gone.back(), gone[gone.size() / 2]);
  } else if (mode == "averaging") {
    const double duration = arg > 0 ? arg : 100;
    Simulation sim(parse_scenario(scenario(n, seed, duration, ""), "bench.ini", {}));
    sim.run();
    const Sample s = sim.sample_now();
    std::printf("averaging n %ld seed %ld virtual_s %.0f events %llu exchanges %llu consensus_distance %.3g\n", n, seed,
                duration, (unsigned long long)sim.totals().events, (unsigned long long)sim.totals().exchanges,
                s.consensus_distance);
    graph_line("end", sim.now(), overlay_graph(sim));
  } else {
    usage();
  }
  resources();
  return 0;
}
