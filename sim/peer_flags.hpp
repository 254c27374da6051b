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

// The testbed's plan of a scenario (`rumor-sim SCENARIO --testbed-plan`, read by
// examples/testbed/run.sh): one JSON object with the founders in id order, each with its class,
// the class's bandwidth (bytes/s, as written: what htb shapes both ways), its share of a core
// (`cpu`: the cgroup's CPU cap), its bandwidth changes ({at, bandwidth}) and its rumor-peer
// flags (peer_flags above), plus the run's seed, min_peers and the scenario's path. Throws as
// peer_flags does, and for a scenario with churn, partitions, loss, links, latency or jitter of
// its own, which the testbed does not build.
std::string testbed_plan(const Scenario& s);

}  // namespace rumor::sim
