// Running scenarios: one (gossip through Simulation, the others through AlgorithmRun), or a
// [sweep] grid of them, several at once, with one combined CSV and a summary over seeds.
//
// A sweep is the Cartesian product of its axes in file order (the first axis varies slowest);
// run k gets the overrides `key=value` of its combination after the file's own assignments and
// before the command line's --set (so --set wins). A value `V+KEY=X+...` (a variant) also
// assigns KEY=X: `algorithm = dpsgd, sgp+topology=onepeer_exp`. Every combination is parsed and checked
// before anything runs: a bad one stops the sweep with the combination named, and nothing is
// written. Runs are independent and each is deterministic, so running them in parallel
// (`parallel` threads, 2 by default: the machine's cores) changes no byte of any output.
//
// Outputs under DIR (docs/sim.md, "Sweeps"):
//   runs/NNN/{timeseries,events,summary}.{csv,json}   each run's own outputs
//   sweep.csv     every run's timeseries rows, prefixed by run and the axes' values
//   runs.csv      one row per run: the axes, time and bytes per peer to the target accuracy,
//                 final accuracy, virtual time, bytes per peer
//   summary.csv / summary.md   one row per combination of the axes other than the seed: runs,
//                 how many reached the target, mean and sd of those numbers over the seeds
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/scenario.hpp"
#include "sim/simulator.hpp"

namespace rumor::sim {

// What a run leaves for the sweep's tables.
struct RunOutcome {
  std::vector<Sample> samples;
  Totals totals;
  double virtual_time = 0;
  std::uint32_t peers = 0;
  std::string invariant;  // [invariants] check = on: the first broken one (Violation::line), or empty
};

// Runs one scenario to the end (either engine) and, if `dir` is not empty, writes its outputs.
// `progress`, if set, is called every 65,536 events of a gossip run (rumor-sim prints a line
// from it now and then on a long run); it must not change the simulation.
RunOutcome run_scenario(const Scenario& s, const std::string& dir,
                        const std::function<void(const Simulation&)>& progress = {});

struct SweepRun {
  std::size_t index = 0;
  std::vector<std::string> values;  // one per axis
  Scenario scenario;
  std::string name;                 // NNN
};

// Expands `base`'s grid (parsing `path` again with each combination's overrides and `sets`).
// Throws ScenarioError naming the combination.
std::vector<SweepRun> expand_sweep(const std::string& path, const Scenario& base, const std::vector<std::string>& sets);

// Time (and bytes per peer) of the first sample whose average-model test accuracy reaches
// `target`; negative when never reached.
struct TargetHit {
  double time = -1, bytes_per_peer = -1;
};
TargetHit time_to_target(const RunOutcome& r, double target);

// Runs every run, `base.sweep_parallel` at a time, writes everything under `out_dir` and
// returns the summary table as markdown (also written as summary.md). `progress` is called
// (from the calling thread) after each run finishes. Throws std::runtime_error on a failed run.
std::string run_sweep(const Scenario& base, const std::vector<SweepRun>& runs, const std::string& out_dir,
                      const std::function<void(const SweepRun&, const RunOutcome&)>& progress = {});

}  // namespace rumor::sim
