// A scenario as real peers: the rumor-peer flags that run peer K of a scenario on this machine
// (`rumor-sim SCENARIO --peer-flags K|all`). The quickstart (examples/quickstart.sh) and the
// calibration's real run (bench/sim_calibration.sh) start their peers with these flags, so the
// real run and the simulated one are read from one file and cannot drift apart.
//
// What carries over: the data set, model, optimizer and schedule of [workload], the shard
// (K/N, N the founders), the seed, and every loop knob (core/knobs.hpp) that differs from its
// default, by the flag of the same name. What does not: the simulator's own models (network,
// compute, churn), which describe the machine rather than the peer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario.hpp"

namespace rumor::sim {

// The flags of founder `k` (1-based, at most s.founders), each its own argv entry. Throws
// ScenarioError for a scenario that real peers cannot run (not gossip, not a model, or k out
// of range).
std::vector<std::string> peer_flags(const Scenario& s, std::uint32_t k);

}  // namespace rumor::sim
