// The [sweep] section of a scenario read into Scenario::sweep (its axes, each value with the
// further assignments of a variant), sweep_target and sweep_parallel. Part of the typed pass
// (scenario.cpp). Not the running of a sweep's runs (sweep.hpp).
#pragma once
#include "sim/ini.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

// [sweep]: axes `KEY = V1,V2,...` (KEY a full section.key or a shorthand), `target`, `parallel`.
// Throws ScenarioError naming the place.
void read_sweep(const ini::Raw& r, Scenario& s);

}  // namespace rumor::sim
