// Fault campaigns (docs/testing.md): every seed draws a random gossip scenario (2 to 64 peers,
// the quadratic workload with training on or off, random H, staleness, codec, mix weight,
// exchanges in flight, streamed or one-shot exchanges, churn, and faults from sim/faults.hpp)
// and runs it under the invariant checker (sim/invariants.hpp). A failing seed replays exactly:
// the scenario is a pure function of the seed, and the run a pure function of the scenario.
//
//   rumor-sim --campaign N [--seed S] [-j J] [--stop-at-first]   seeds S .. S+N-1
//   rumor-sim --replay SEED [--out DIR]                           one seed, its INI and outputs
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/faults.hpp"
#include "sim/invariants.hpp"

namespace rumor::sim {

// The scenario text (INI) that seed `seed` draws; `mutation` (test-only) is put in [faults].
std::string campaign_scenario(std::uint64_t seed, const std::string& mutation = "");

struct CampaignRun {
  std::uint64_t seed = 0;
  std::string scenario;              // one line: peers, training, H, TAU, codec, ... , faults on
  std::optional<Violation> first;    // the first broken invariant (none: clean)
  std::uint64_t events = 0;
  double virtual_time = 0;
  FaultCounts faults{};
  std::string error;                 // the scenario or the run threw (counts as a failure)
  bool failed() const { return first.has_value() || !error.empty(); }
  std::string line() const;          // "seed S: SCENARIO: FIRST BROKEN INVARIANT"
};

// Runs one seed under the checker (stopping at its first broken invariant, or at the
// checker's run bound). With `out_dir`: writes scenario.ini there and the outputs
// (timeseries.csv, events.csv with every exchange and view change, summary.json).
CampaignRun run_campaign_seed(std::uint64_t seed, const std::string& mutation = "", const std::string& out_dir = "");

struct CampaignOptions {
  std::uint64_t runs = 100, seed = 1;
  unsigned jobs = 1;
  bool stop_at_first = false;
  std::string mutation;  // test-only (faults.mutation)
  // Called (under a lock) for each failing seed as it is found, and for progress every
  // `progress_every` runs done.
  std::function<void(const CampaignRun&)> on_failure;
  std::function<void(std::uint64_t done, std::uint64_t failures)> on_progress;
  std::uint64_t progress_every = 100;
};

struct CampaignResult {
  std::uint64_t runs = 0, events = 0, failures = 0;
  FaultCounts faults{};
  std::vector<CampaignRun> failed;  // in seed order
  std::string summary() const;      // the closing lines: runs, events checked, failures, faults fired
};

CampaignResult run_campaign(const CampaignOptions& o);

}  // namespace rumor::sim
