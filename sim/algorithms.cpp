// The comparison algorithms (algorithms.hpp; docs/sim.md, "Algorithms"): set-up, samples and
// the public face (the families are in algorithms_rounds.cpp and algorithms_servers.cpp).
#include "sim/algorithms_impl.hpp"

namespace rumor::sim {

AlgorithmRun::AlgorithmRun(const Scenario& s) : impl_(std::make_unique<Impl>(s)) {}
AlgorithmRun::~AlgorithmRun() = default;
void AlgorithmRun::run() { impl_->run(); }
double AlgorithmRun::now() const { return impl_->now; }
const Scenario& AlgorithmRun::scenario() const { return impl_->s; }
std::uint32_t AlgorithmRun::peers() const { return impl_->n; }
std::span<const float> AlgorithmRun::params(std::uint32_t peer) const {
  RUMOR_CHECK(peer < impl_->n);
  return impl_->peers[peer]->params();
}
std::vector<float> AlgorithmRun::global_params() const {
  if (!impl_->theta.empty()) return impl_->theta;
  return std::vector<float>(impl_->outer.begin(), impl_->outer.end());
}
double AlgorithmRun::push_sum_weight(std::uint32_t peer) const {
  RUMOR_CHECK(peer < impl_->weight.size());
  return impl_->weight[peer];
}
std::span<const double> AlgorithmRun::push_sum_numerator(std::uint32_t peer) const {
  RUMOR_CHECK(peer < impl_->num.size());
  return impl_->num[peer];
}
const Spectrum& AlgorithmRun::spectrum() const { return impl_->spectrum; }
std::uint64_t AlgorithmRun::rounds() const {
  return impl_->s.algorithm == Algorithm::PsAsync || impl_->s.algorithm == Algorithm::PsSsp ? impl_->server_steps : impl_->round;
}
std::uint64_t AlgorithmRun::max_clock_gap() const { return impl_->max_gap; }
double AlgorithmRun::mean_staleness() const {
  return impl_->staleness_n ? impl_->staleness_sum / static_cast<double>(impl_->staleness_n) : 0.0;
}
std::uint64_t AlgorithmRun::message_bytes() const { return impl_->B; }
double AlgorithmRun::allreduce_time() const { return impl_->allreduce_time(); }
const std::vector<Sample>& AlgorithmRun::samples() const { return impl_->samples; }
const Totals& AlgorithmRun::totals() const { return impl_->totals; }

std::string AlgorithmRun::timeseries_csv() const { return timeseries_csv_of(impl_->samples); }
std::string AlgorithmRun::events_csv() const { return kEventsCsvHeader + impl_->events; }

std::string AlgorithmRun::summary_json() const {
  const Impl& w = *impl_;
  const Totals& t = w.totals;
  const Sample last = w.samples.empty() ? Sample{} : w.samples.back();
  Json j;
  j["scenario"] = w.s.source;
  j["seed"] = w.s.seed;
  j["algorithm"] = algorithm_name(w.s.algorithm);
  j["workload"] = w.s.workload == WorkloadKind::Model ? w.s.model : "quadratic";
  j["partition"] = w.s.partition;
  j["training"] = w.s.training;
  j["topology"] = uses_topology(w.s.algorithm) ? topology_name(w.s.topology) : "none";
  if (w.s.algorithm == Algorithm::Dpsgd) {
    j["combine"] = w.s.atc ? "atc" : "cta";
    j["weights"] = w.s.weights == MixingWeights::Uniform ? "uniform" : "metropolis";
  }
  if (w.graph) {
    j["slem"] = w.spectrum.slem;
    j["slem_per_round"] = w.spectrum.slem_per_round;
    j["graph_period"] = w.spectrum.period;
  }
  j["peers"] = w.n;
  j["local_steps"] = w.s.loop.gossip.local_steps;
  j["param_count"] = w.P;
  j["message_bytes"] = w.B;
  j["allreduce_time"] = w.allreduce_time();
  j["virtual_time"] = w.now;
  j["rounds"] = w.round;
  j["steps"] = t.steps;
  j["communications"] = t.exchanges;
  j["messages"] = t.messages;
  j["bytes"] = t.bytes;
  j["bytes_per_peer"] = static_cast<double>(t.bytes) / w.n;
  if (w.s.algorithm == Algorithm::PsAsync || w.s.algorithm == Algorithm::PsSsp) {
    j["max_clock_gap"] = w.max_gap;
    j["mean_staleness"] = w.staleness_n ? w.staleness_sum / static_cast<double>(w.staleness_n) : 0.0;
    j["waits"] = w.waits;
    j["wait_seconds"] = w.wait_seconds;
  }
  j["final"] = final_sample_json(last);
  return summary_text(j);
}

void AlgorithmRun::write_outputs(const std::string& dir) const {
  write_run_outputs(dir, timeseries_csv(), events_csv(), summary_json());
}

}  // namespace rumor::sim
