// What every kind of run (Simulation, AlgorithmRun) writes its outputs with: fmt for the CSV
// rows and detail strings, nlohmann's ordered JSON for summary.json (NaN and Inf come out as
// null). Private to sim/: these headers stay out of simulator.hpp, which many files include.
#pragma once
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sim/simulator.hpp"

namespace rumor::sim {

using Json = nlohmann::ordered_json;

// The "final" object of summary.json: the last sample's time, accuracy, loss, ...
Json final_sample_json(const Sample& last);
// summary.json's text: two-space indented, keys in the order they were set, a final newline.
inline std::string summary_text(const Json& j) { return j.dump(2) + "\n"; }

}  // namespace rumor::sim
