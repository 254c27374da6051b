// The random streams of one simulation, all forked from the scenario's seed (core/rng.hpp).
// Each consumer has its own stream, so a change in one model (say, adding jitter) does not
// shift the draws of another (the peers' protocol choices, their step times, the data order).
// Peer-indexed streams use the index itself (the Env of peer i is Rng(seed).fork(i), as the
// project's design brief for the simulator asks); everything else lives above 2^40, far from
// any peer index.
#pragma once
#include <cstdint>

namespace rumor::sim::streams {

constexpr std::uint64_t kComputeBase = 1ull << 40;  // + peer index: step-time draws
constexpr std::uint64_t kNetwork = (1ull << 41) + 1;  // jitter and loss
constexpr std::uint64_t kChurn = (1ull << 41) + 2;    // random victims, joiners' seeds
constexpr std::uint64_t kStragglers = (1ull << 41) + 3;
constexpr std::uint64_t kPoisson = (1ull << 41) + 4;  // Poisson churn times (scenario.cpp)
constexpr std::uint64_t kWorkload = (1ull << 41) + 5; // per-peer data noise / initial values
constexpr std::uint64_t kEvalRows = (1ull << 41) + 6; // the evaluation subset of the test set
constexpr std::uint64_t kFaults = (1ull << 41) + 7;   // every fault point's draws (sim/faults.hpp)
constexpr std::uint64_t kSliceBase = 1ull << 42;      // + peer index: the phase of its time slices (compute.time_slice)

}  // namespace rumor::sim::streams
