// Churn sampling: the times of Poisson churn events (`churn.crash_rate`, `leave_rate`,
// `join_rate`), all drawn when the scenario is read, from its seed, so the set of peer ids is
// known before the run. Not the reading of the [churn] keys (scenario.cpp) nor carrying the
// events out (the simulator).
#pragma once
#include <vector>

#include "core/rng.hpp"

namespace rumor::sim {

// Event times of a Poisson process of `rate` per second on [from, until): exponential gaps
// drawn from `r` (one draw past the last event, which ends the window).
std::vector<double> poisson_times(Rng& r, double rate, double from, double until);

}  // namespace rumor::sim
