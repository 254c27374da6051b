// The [sweep] section read into a Scenario (see scenario_sweep.hpp).
#include "sim/scenario_sweep.hpp"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rumor::sim {

using ini::convert;
using ini::fail;
using ini::kClassKeys;
using ini::kKeys;
using ini::kListKeys;
using ini::RawValue;
using ini::to_number;
using ini::trim;

void read_sweep(const ini::Raw& r, Scenario& s) {
  static const std::map<std::string, std::string> shorthand = {
      {"algorithm", "algorithm.kind"}, {"topology", "gossip.topology"}, {"peers", "run.peers"},
      {"seed", "run.seed"},            {"seeds", "run.seed"},           {"H", "gossip.local_steps"},
      {"local_steps", "gossip.local_steps"}, {"partition", "workload.partition"},
      {"bandwidth", "network.bandwidth"}, {"latency", "network.latency"}, {"weights", "algorithm.weights"},
      {"combine", "algorithm.combine"}};
  if (const RawValue* v = r.last("sweep.target")) {
    s.sweep_target = to_number(v->value, v->where, "sweep.target", nullptr);
    if (!(s.sweep_target > 0 && s.sweep_target <= 1)) fail(v->where, "sweep.target", "a test accuracy in (0, 1]");
  }
  if (const RawValue* v = r.last("sweep.parallel")) {
    convert(v->value, v->where, "sweep.parallel", s.sweep_parallel);
    if (s.sweep_parallel < 1 || s.sweep_parallel > 64) fail(v->where, "sweep.parallel", "1 to 64 runs at once");
  }
  const auto resolve_key = [&](const std::string& label, const std::string& where, const std::string& ctx) {
    auto it = shorthand.find(label);
    const std::string key = it != shorthand.end() ? it->second : label;
    const auto dot = key.find_last_of('.');
    bool known = false;
    if (dot != std::string::npos && dot > 0) {
      const std::string sec = key.substr(0, dot), k = key.substr(dot + 1);
      if (sec.rfind("class.", 0) == 0) {
        known = kClassKeys.count(k) > 0;
      } else if (auto ks = kKeys.find(sec); ks != kKeys.end()) {
        known = ks->second.count(k) > 0 && !kListKeys.count(key);
      }
    }
    if (!known)
      fail(where, ctx,
           "'" + label + "' is not a scenario key: give section.key (for example network.latency) or one of algorithm, "
           "topology, peers, seeds, H, partition, bandwidth, latency, weights, combine");
    return key;
  };
  for (const std::string& label : r.sweep_order) {
    const RawValue* v = r.last("sweep." + label);
    SweepAxis a;
    a.label = label;
    a.where = v->where;
    a.key = resolve_key(label, v->where, "sweep." + label);
    for (const auto& axis : s.sweep)
      if (axis.key == a.key) fail(v->where, "sweep." + label, "the same key as sweep." + axis.label);
    std::size_t start = 0;
    while (start <= v->value.size()) {
      const auto comma = v->value.find(',', start);
      const std::string item = trim(v->value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      start = comma == std::string::npos ? v->value.size() + 1 : comma + 1;
      if (item.empty()) fail(v->where, "sweep." + label, "empty value in '" + v->value + "'");
      // VALUE[+KEY=V...]: a variant carries further assignments.
      std::vector<std::pair<std::string, std::string>> as;
      std::size_t p0 = 0;
      while (p0 <= item.size()) {
        const auto plus = item.find('+', p0);
        const std::string part = trim(item.substr(p0, plus == std::string::npos ? std::string::npos : plus - p0));
        p0 = plus == std::string::npos ? item.size() + 1 : plus + 1;
        if (part.empty()) fail(v->where, "sweep." + label, "empty part in '" + item + "'");
        if (as.empty()) {
          as.emplace_back(a.key, part);
          continue;
        }
        const auto eq = part.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
          fail(v->where, "sweep." + label, "expected VALUE+KEY=V in '" + item + "'");
        as.emplace_back(resolve_key(trim(part.substr(0, eq)), v->where, "sweep." + label), trim(part.substr(eq + 1)));
      }
      a.values.push_back(item);
      a.assignments.push_back(std::move(as));
    }
    s.sweep.push_back(std::move(a));
  }
}

}  // namespace rumor::sim
