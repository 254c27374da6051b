// Timeseries samples: the average model's loss and accuracy, consensus distance, and the
// peers' own models (sample_peer_models, shared with the algorithm baselines).
#include "sim/simulation_impl.hpp"

#include "core/mix.hpp"

namespace rumor::sim {

void sample_consensus(Sample& r, std::size_t n, const std::function<std::span<const float>(std::size_t)>& model,
                      const std::function<double(std::size_t)>& steps, std::vector<double>& xbar) {
  const std::size_t P = xbar.size();
  std::fill(xbar.begin(), xbar.end(), 0.0);
  double step_sum = 0;
  // One pass over the models (at 10,000 peers they are hundreds of MB, and reading them is the
  // cost): the mean, and the squared deviations from a reference model ref, the first one.
  // Sum (x - mean)^2 = Sum (x - ref)^2 - n Sum (mean - ref)^2; ref is one of the models, so
  // both terms are of the spread's size and the subtraction loses about a bit.
  const float* ref = n > 0 ? model(0).data() : nullptr;
  // The squares are summed in 8 fixed lanes (element j in lane j % 8), which vectorises and
  // gives the same sum whatever the buffers' addresses.
  constexpr std::size_t kLanes = 8;
  double lanes[kLanes] = {};
  const std::size_t body = P / kLanes * kLanes;
  for (std::size_t i = 0; i < n; ++i) {
    const float* x = model(i).data();
    for (std::size_t j = 0; j < body; j += kLanes)
      for (std::size_t k = 0; k < kLanes; ++k) {
        xbar[j + k] += x[j + k];
        const double d = static_cast<double>(x[j + k]) - ref[j + k];
        lanes[k] += d * d;
      }
    for (std::size_t j = body; j < P; ++j) {
      xbar[j] += x[j];
      const double d = static_cast<double>(x[j]) - ref[j];
      lanes[j - body] += d * d;
    }
    step_sum += steps(i);
  }
  double dev_ref = 0;
  for (double v : lanes) dev_ref += v;
  const double nd = static_cast<double>(n);
  for (auto& v : xbar) v /= nd;
  double shift = 0, norm = 0;
  for (std::size_t j = 0; j < P; ++j) {
    const double d = xbar[j] - ref[j];
    shift += d * d;
    norm += xbar[j] * xbar[j];
  }
  const double dev = std::max(0.0, dev_ref - nd * shift);
  r.mean_step = step_sum / nd;
  r.spread = std::sqrt(dev / nd);
  r.consensus_distance = norm > 0 ? r.spread / std::sqrt(norm) : (dev > 0 ? std::numeric_limits<double>::infinity() : 0.0);
}

void sample_mean_model(Sample& r, Workload& work, bool quadratic, const std::vector<double>& xbar,
                       std::vector<float>& scratch) {
  if (quadratic) {
    r.loss = work.quadratic_loss(xbar);
    r.test_acc = 0;
    return;
  }
  scratch.assign(xbar.begin(), xbar.end());
  const EvalResult e = work.evaluate(scratch);
  r.loss = e.loss;
  r.test_acc = e.accuracy;
}

Sample Simulation::Impl::compute_sample(double t) {
  Sample r;
  r.time = t;
  std::vector<const Peer*> set;
  // A joiner still fetching the swarm's model holds only its own initialisation, which it
  // never trains on or reports (rumor-peer writes no eval before the state arrives): leave it
  // out, or every join would show as a dip in the average model.
  for (const Peer& p : peers)
    if (p.running() && p.model && (!p.loop || p.gossip()->state_ready())) set.push_back(&p);
  r.peers = static_cast<std::uint32_t>(set.size());
  const bool finished = set.empty();
  std::vector<DoneModel> done;
  if (finished)
    for (const Peer& p : peers)
      if (p.state == PeerState::Done && p.model) {
        set.push_back(&p);
        done.push_back({p.index, p.life, p.model.get()});
      }
  r.bytes = totals.bytes;
  r.exchanges = totals.exchanges;
  r.failed = totals.failed;
  r.dropped = totals.dropped;
  // Only finished models, the same ones as at the last sample: a finished peer's process is
  // gone and its model frozen, so the figures are those of that sample (a swarm waiting for
  // its last joiners samples thousands of finished models for seconds of virtual time).
  if (finished && !done.empty() && done == done_sampled && !samples.empty()) {
    const Sample& c = samples.back();
    r.mean_step = c.mean_step;
    r.loss = c.loss;
    r.test_acc = c.test_acc;
    r.peer_loss = c.peer_loss;
    r.peer_acc = c.peer_acc;
    r.peer_acc_min = c.peer_acc_min;
    r.consensus_distance = c.consensus_distance;
    r.spread = c.spread;
    return r;
  }
  done_sampled = std::move(done);
  if (set.empty()) {
    r.mean_step = r.loss = r.test_acc = r.peer_loss = r.peer_acc = r.peer_acc_min = kNaN;
    r.consensus_distance = r.spread = kNaN;
    return r;
  }
  sample_consensus(
      r, set.size(), [&](std::size_t i) { return std::span<const float>(set[i]->model->params()); },
      [&](std::size_t i) { return static_cast<double>(peer_steps(*set[i])); }, xbar);
  sample_mean_model(r, *work, s.workload == WorkloadKind::Quadratic, xbar, xbar_f);
  sample_peer_models(r, s.eval_peers, set.size(), [&](std::size_t i) { return work->evaluate(set[i]->model->params()); });
  return r;
}

void Simulation::Impl::record_sample(double t) {
  const double keep = now;
  now = t;
  samples.push_back(compute_sample(t));
  now = keep;
}


void sample_peer_models(Sample& r, std::size_t eval_peers, std::size_t n,
                        const std::function<EvalResult(std::size_t)>& eval) {
  const std::size_t k = std::min(eval_peers, n);
  r.peer_loss = r.peer_acc = r.peer_acc_min = kNaN;
  if (k == 0) return;
  double l = 0, a = 0, amin = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < k; ++j) {
    const EvalResult e = eval(j * n / k);
    l += e.loss;
    a += e.accuracy;
    amin = std::min(amin, e.accuracy);
  }
  r.peer_loss = l / static_cast<double>(k);
  r.peer_acc = a / static_cast<double>(k);
  r.peer_acc_min = amin;
}

std::vector<double> Simulation::mean_params(std::size_t* count) const {
  std::vector<double> m(impl_->work->param_count(), 0.0);
  std::size_t n = 0;
  for (const Peer& p : impl_->peers)
    if (p.running() && p.model) {
      const auto x = p.model->params();
      for (std::size_t j = 0; j < m.size(); ++j) m[j] += x[j];
      ++n;
    }
  if (n)
    for (auto& v : m) v /= static_cast<double>(n);
  if (count) *count = n;
  return m;
}
}  // namespace rumor::sim
