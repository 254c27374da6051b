// The outputs of a run: timeseries.csv, events.csv, summary.json (docs/sim.md), written with
// fmt and nlohmann's ordered JSON (sim/output.hpp).
#include "sim/simulation_impl.hpp"
#include "sim/output.hpp"

#include <filesystem>
#include <fstream>

namespace rumor::sim {

std::string Simulation::timeseries_csv() const { return timeseries_csv_of(impl_->samples); }

std::string timeseries_csv_of(const std::vector<Sample>& samples) {
  std::string out =
      "time,peers,mean_step,loss,test_acc,peer_loss,peer_acc,peer_acc_min,consensus_distance,spread,bytes,exchanges,"
      "exchanges_failed,dropped\n";
  for (const Sample& r : samples)
    out += fmt::format("{:.6f},{},{:.3f},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{},{},{},{}\n", r.time, r.peers,
                       r.mean_step, r.loss, r.test_acc, r.peer_loss, r.peer_acc, r.peer_acc_min, r.consensus_distance,
                       r.spread, r.bytes, r.exchanges, r.failed, r.dropped);
  return out;
}

std::string Simulation::events_csv() const { return kEventsCsvHeader + impl_->events; }



Json final_sample_json(const Sample& last) {
  Json f;
  f["time"] = last.time;
  f["test_acc"] = last.test_acc;
  f["loss"] = last.loss;
  f["peer_acc"] = last.peer_acc;
  f["consensus_distance"] = last.consensus_distance;
  f["mean_step"] = last.mean_step;
  return f;
}

void write_run_outputs(const std::string& dir, const std::string& timeseries, const std::string& events,
                       const std::string& summary) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create output directory '" + dir + "': " + ec.message());
  const auto put = [&](const char* name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
  };
  put("timeseries.csv", timeseries);
  put("events.csv", events);
  put("summary.json", summary);
}


std::string Simulation::summary_json() const {
  const Impl& w = *impl_;
  const Totals& t = w.totals;
  std::uint32_t done = 0, crashed = 0, left = 0, live = 0;
  double acc_sum = 0, acc_n = 0;
  for (const Peer& p : w.peers) {
    done += p.state == PeerState::Done;
    crashed += p.state == PeerState::Crashed;
    left += p.state == PeerState::Left;
    live += p.running();
    if (p.state == PeerState::Done && std::isfinite(p.final_acc)) {
      acc_sum += p.final_acc;
      acc_n += 1;
    }
  }
  const Sample last = w.samples.empty() ? Sample{} : w.samples.back();
  Json j;
  j["scenario"] = w.s.source;
  j["seed"] = w.s.seed;
  j["workload"] = w.s.workload == WorkloadKind::Model ? w.s.model : "quadratic";
  j["training"] = w.s.training;
  j["topology"] = topology_name(w.s.topology);
  j["founders"] = w.s.founders;
  j["peer_ids"] = w.peers.size();
  j["virtual_time"] = w.now;
  j["events"] = t.events;
  j["steps"] = t.steps;
  j["messages"] = t.messages;
  j["bytes"] = t.bytes;
  j["dropped"] = t.dropped;
  j["refused"] = t.refused;
  j["exchanges"] = t.exchanges;
  j["answered"] = t.answered;
  j["exchanges_failed"] = t.failed;
  j["exchanges_declined"] = t.declined;
  j["rejected"] = t.rejected;
  j["crashes"] = t.crashes;
  j["leaves"] = t.leaves;
  j["joins"] = t.joins;
  j["peers_done"] = done;
  j["peers_crashed"] = crashed;
  j["peers_left"] = left;
  j["peers_running"] = live;
  j["final"] = final_sample_json(last);
  j["peer_final_test_acc"] = acc_n > 0 ? acc_sum / acc_n : kNaN;
  // Only with faults or the checker on: every other run's summary stays as it was.
  if (w.s.faults.any() || w.s.faults.mutation != Mutation::None) {
    Json f;
    for (std::size_t k = 0; k < kFaultPoints; ++k) f[fault_name(static_cast<FaultPoint>(k))] = w.fault_counts[k];
    j["faults"] = f;
    if (w.s.faults.mutation != Mutation::None) j["mutation"] = mutation_name(w.s.faults.mutation);
  }
  if (w.checker) {
    Json inv;
    const auto& c = w.checker->counts();
    inv["events_checked"] = c.events;
    inv["violations"] = w.checker->violations();
    inv["first"] = w.checker->first() ? w.checker->first()->line() : std::string();
    inv["conservation"] = w.checker->conservation_on();
    inv["detection_bound"] = w.checker->detection_bound();
    inv["heal_bound"] = w.checker->heal_bound();
    inv["liveness_bound"] = w.checker->liveness_bound();
    j["invariants"] = inv;
  }
  return summary_text(j);
}

void Simulation::write_outputs(const std::string& dir) const {
  write_run_outputs(dir, timeseries_csv(), events_csv(), summary_json());
}

}  // namespace rumor::sim
