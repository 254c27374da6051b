// The rumor-peer flags of a scenario's peers (sim/peer_flags.hpp).
#include "sim/peer_flags.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/knobs.hpp"

namespace rumor::sim {

std::vector<std::string> peer_flags(const Scenario& s, std::uint32_t k) {
  if (s.algorithm != Algorithm::Gossip)
    throw ScenarioError(s.source + ": --peer-flags: real peers run gossip, not algorithm.kind = " +
                        algorithm_name(s.algorithm));
  if (s.workload != WorkloadKind::Model || !s.training)
    throw ScenarioError(s.source + ": --peer-flags: real peers train a model (workload.kind = model, training on)");
  if (k < 1 || k > s.founders)
    throw ScenarioError(fmt::format("{}: --peer-flags: peer {} of {} founders", s.source, k, s.founders));
  std::vector<std::string> f = {"--data",      s.data,
                                "--model",     s.model,
                                "--partition", s.partition,
                                "--shard",     fmt::format("{}/{}", k, s.founders),
                                "--optimizer", s.optimizer,
                                "--lr",        fmt::format("{:g}", s.lr),
                                "--batch",     std::to_string(s.batch),
                                "--seed",      std::to_string(s.seed)};
  if (s.init != InitScheme::He) f.insert(f.end(), {"--init", init_scheme_name(s.init)});
  if (s.momentum != 0.9) f.insert(f.end(), {"--momentum", fmt::format("{:g}", s.momentum)});
  if (s.weight_decay != 0) f.insert(f.end(), {"--weight-decay", fmt::format("{:g}", s.weight_decay)});
  if (s.schedule != "constant") f.insert(f.end(), {"--lr-schedule", s.schedule});
  if (s.warmup_steps) f.insert(f.end(), {"--warmup-steps", std::to_string(s.warmup_steps)});
  if (s.schedule == "wsd") f.insert(f.end(), {"--decay-fraction", fmt::format("{:g}", s.decay_fraction)});
  const LoopSettings defaults;
  for (const Knob& knob : loop_knobs()) {
    if (!(knob.scope & Knob::kDaemon) || !(knob.scope & Knob::kSim)) continue;
    const std::string v = knob_value(knob, s.loop);
    if (v == knob_value(knob, defaults)) continue;
    if (knob.type == Knob::Type::Bool) f.push_back(knob_flag(knob) + "=" + v);
    else f.insert(f.end(), {knob_flag(knob), v});
  }
  return f;
}

std::string testbed_plan(const Scenario& s) {
  const auto refuse = [&](const std::string& what) {
    throw ScenarioError(s.source + ": --testbed-plan: the testbed does not build " + what);
  };
  if (!s.churn.empty()) refuse("churn ([churn])");
  if (!s.partitions.empty()) refuse("partitions (network.partition)");
  if (s.loss > 0) refuse("message loss (network.loss): tc has no netem here");
  if (!s.links.empty()) refuse("link lines (network.link): links are shaped per peer, by class");
  if (s.jitter > 0) refuse("jitter (network.jitter): tc has no netem here");
  nlohmann::ordered_json j;
  j["scenario"] = s.source;
  j["seed"] = s.seed;
  j["min_peers"] = s.loop.min_peers;
  j["limit_receive"] = s.limit_receive;
  auto peers = nlohmann::ordered_json::array();
  std::uint32_t k = 0;
  for (const PeerClass& c : s.classes) {
    for (std::uint32_t i = 0; i < c.count; ++i, ++k) {
      nlohmann::ordered_json p;
      p["id"] = "p" + std::to_string(k);
      p["class"] = c.name;
      p["bandwidth"] = c.bandwidth;
      p["cpu"] = c.cpu;
      p["cpu_period"] = c.cpu_period;
      auto ch = nlohmann::ordered_json::array();
      for (const auto& b : c.bandwidth_changes) ch.push_back({{"at", b.at}, {"bandwidth", b.bandwidth}});
      p["bandwidth_changes"] = ch;
      p["flags"] = peer_flags(s, k + 1);
      peers.push_back(p);
    }
  }
  j["peers"] = peers;
  return j.dump(1) + "\n";
}

}  // namespace rumor::sim
