// The comparison algorithms' shared state (private to sim/): AlgorithmRun::Impl, whose parts live in
//   algorithms.cpp          set-up, timing helpers, samples, the public face and the summary
//   algorithms_rounds.cpp   the round-based family: D-PSGD, SGP (push-sum), local SGD, DiLoCo,
//                           centralized SGD, ring all-reduce
//   algorithms_servers.cpp  the parameter servers: synchronous, asynchronous, SSP
#pragma once
#include "sim/output.hpp"
#include "sim/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "core/check.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/rng.hpp"
#include "sim/network.hpp"
#include "sim/streams.hpp"
#include "sim/workload.hpp"

namespace rumor::sim {


inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr std::uint64_t kTopologyStream = (1ull << 41) + 7;  // random_regular's graph

inline bool is_server(Algorithm a) {
  return a == Algorithm::Centralized || a == Algorithm::AllReduce || a == Algorithm::PsSync ||
         a == Algorithm::PsAsync || a == Algorithm::PsSsp;
}


struct AlgorithmRun::Impl {
  const Scenario s;
  std::uint32_t n = 0;
  std::unique_ptr<Workload> work;
  std::unique_ptr<Network> net;
  std::vector<std::unique_ptr<PeerModel>> peers;
  std::vector<Rng> compute_rng;
  std::vector<std::vector<std::uint32_t>> stragglers;  // per peer: indices of its straggler lines
  std::vector<double> clock;                           // per peer: virtual time of its next step
  std::size_t P = 0;
  std::uint64_t B = 0;  // bytes of one model message
  std::uint64_t R = 0;  // steps per peer (0: until run.duration)
  std::uint64_t rounds_per_epoch = 0;  // of the mean shard (model workloads with epochs)
  double now = 0;
  std::uint64_t round = 0;
  Totals totals;
  std::vector<Sample> samples;
  std::string events;
  double next_sample = 0;
  bool state_changed = true;  // since the last sample was evaluated
  std::vector<double> xbar;
  std::vector<float> xbar_f;

  // D-PSGD / SGP
  std::unique_ptr<CommGraph> graph;
  std::vector<Mixing> mixing;  // one per round of the graph's period
  Spectrum spectrum;
  std::vector<std::vector<double>> num;  // SGP numerators
  std::vector<double> weight;            // SGP weights
  std::vector<std::vector<float>> next;  // mixing output buffers
  // DiLoCo
  std::vector<double> outer, velocity;
  // Server algorithms: the one model and its optimizer.
  std::vector<float> theta;
  std::unique_ptr<Optimizer> server_opt;
  ScheduleConfig server_schedule;
  std::uint64_t server_steps = 0;
  std::vector<double> grad_sum, grad_tmp;
  std::vector<float> grad_f;
  // Parameter servers (asynchronous)
  std::vector<std::uint64_t> ps_clock, ps_version;
  std::uint64_t max_gap = 0;
  double staleness_sum = 0;
  std::uint64_t staleness_n = 0, waits = 0;
  double wait_seconds = 0;

  explicit Impl(const Scenario& sc) : s(sc) {
    if (s.algorithm == Algorithm::Gossip) throw std::invalid_argument("AlgorithmRun: gossip runs in Simulation");
    n = s.founders;
    if (math_threads() != 1) set_math_threads(1);  // as Simulation: sums in a fixed order
    if (!s.training && s.algorithm != Algorithm::Dpsgd && s.algorithm != Algorithm::Sgp)
      throw std::invalid_argument(std::string("algorithm.kind = ") + algorithm_name(s.algorithm) +
                                  ": training = off (pure averaging) is for dpsgd and sgp");
    work = std::make_unique<Workload>(s, n);
    P = work->param_count();
    B = 32 + s.header_bytes + 4 * static_cast<std::uint64_t>(P);
    std::vector<std::uint32_t> class_of;
    for (std::uint32_t c = 0; c < s.classes.size(); ++c)
      for (std::uint32_t k = 0; k < s.classes[c].count; ++k) class_of.push_back(c);
    net = std::make_unique<Network>(s, class_of, Rng(s.seed).fork(streams::kNetwork));
    class_of_ = class_of;
    const Rng root(s.seed);
    stragglers.resize(n);
    for (std::size_t k = 0; k < s.stragglers.size(); ++k) {
      std::vector<std::uint32_t> who = s.stragglers[k].who;
      if (s.stragglers[k].fraction >= 0) {
        std::vector<std::uint32_t> f(n);
        for (std::uint32_t i = 0; i < n; ++i) f[i] = i;
        Rng r = root.fork(streams::kStragglers).fork(k);
        r.shuffle(f);
        f.resize(static_cast<std::size_t>(std::llround(s.stragglers[k].fraction * n)));
        who = f;
      }
      for (auto i : who) stragglers[i].push_back(static_cast<std::uint32_t>(k));
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      compute_rng.push_back(root.fork(streams::kComputeBase + i).fork(0));
      peers.push_back(work->make_peer(i, 0));
    }
    // Every worker starts once it has loaded (compute.start): a synchronous round waits for
    // the last, as DDP's first all-reduce waits for every rank.
    clock.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) clock[i] = s.classes[class_of_[i]].start;
    // Steps per peer: workload.steps, else epochs of the mean shard, else until run.duration,
    // else 5 epochs (the gossip simulator's default).
    if (s.loop.steps > 0) {
      R = s.loop.steps;
    } else if (s.workload == WorkloadKind::Model && s.training && s.loop.epochs > 0) {
      double rows = 0;
      for (std::uint32_t i = 0; i < n; ++i) rows += static_cast<double>(work->shard_rows(i));
      const double per_epoch = std::ceil(rows / n / static_cast<double>(s.batch));
      rounds_per_epoch = static_cast<std::uint64_t>(per_epoch);
      R = static_cast<std::uint64_t>(std::ceil(s.loop.epochs * per_epoch));
    } else if (s.duration <= 0 && s.loop.duration_s <= 0) {
      throw std::invalid_argument(std::string("algorithm.kind = ") + algorithm_name(s.algorithm) +
                                  ": give workload.steps (rounds) or run.duration");
    }
    if (s.algorithm == Algorithm::Dpsgd || s.algorithm == Algorithm::Sgp) {
      graph = std::make_unique<CommGraph>(s.topology, n, s.degree, Rng(s.seed).fork(kTopologyStream)());
      for (std::uint32_t r = 0; r < graph->period(); ++r)
        mixing.push_back(s.algorithm == Algorithm::Sgp ? push_sum_mixing(graph->at(r)) : dpsgd_mixing(graph->at(r), s.weights));
      if (s.algorithm == Algorithm::Dpsgd) {
        // D-PSGD averages only with a doubly stochastic matrix (rows sum to 1 by construction).
        for (const Mixing& w : mixing) {
          std::vector<double> col(n, 0.0);
          for (std::uint32_t i = 0; i < n; ++i)
            for (const auto& [j, v] : w[i]) col[j] += v;
          for (double c : col)
            if (std::fabs(c - 1) > 1e-12)
              throw std::invalid_argument(std::string("D-PSGD on ") + topology_name(s.topology) +
                                          ": the mixing matrix is not doubly stochastic (an irregular graph); use sgp");
        }
      }
      if (n <= 2048) spectrum = mixing_spectrum(mixing, n);
      next.assign(n, std::vector<float>(P));
    }
    if (s.algorithm == Algorithm::Sgp) {
      weight.assign(n, 1.0);
      num.resize(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        const auto x = peers[i]->params();
        num[i].assign(x.begin(), x.end());
      }
    }
    if (s.algorithm == Algorithm::Diloco) {
      outer.assign(P, 0.0);
      for (std::uint32_t i = 0; i < n; ++i) {
        const auto x = peers[i]->params();
        for (std::size_t j = 0; j < P; ++j) outer[j] += x[j];
      }
      for (auto& v : outer) v /= n;
      velocity.assign(P, 0.0);
    }
    if (is_server(s.algorithm)) {
      const auto x0 = peers[0]->params();
      theta.assign(x0.begin(), x0.end());
      server_opt = make_optimizer(work->optimizer_config(), P);
      server_schedule = work->schedule_config(0);
      for (auto& p : peers) std::copy(theta.begin(), theta.end(), p->params().begin());
      ps_clock.assign(n, 0);
      ps_version.assign(n, 0);
    }
    xbar.resize(P);
    event(0, -1, "start", "", 0, 0, algorithm_name(s.algorithm));
  }

  std::vector<std::uint32_t> class_of_;

  void event(double t, std::int64_t peer, const char* what, const std::string& other, std::uint64_t clk, double value,
             const std::string& detail) {
    events += fmt::format("{:.6f},{},{},{},{},{:.9g},{}\n", t, peer < 0 ? "" : "p" + std::to_string(peer), what, other, clk,
                          value, detail);
  }

  double step_time(std::uint32_t i, double t) {
    const PeerClass& c = s.classes[class_of_[i]];
    double m = c.step_time;
    for (auto k : stragglers[i]) {
      const StragglerSpec& st = s.stragglers[k];
      if (t >= st.at && (st.until < 0 || t < st.until)) m *= st.factor;
    }
    Rng& r = compute_rng[i];
    switch (c.dist) {
      case StepDist::Constant: return m;
      case StepDist::Normal: return m * std::max(0.05, 1.0 + c.sd * r.normal());
      case StepDist::Lognormal: return m * std::exp(c.sd * r.normal() - 0.5 * c.sd * c.sd);
      case StepDist::Exponential: return m * r.exponential(1.0);
    }
    return m;
  }

  // The slowest NIC of the ring at virtual time t (classes' bandwidth_change applies).
  double min_bandwidth(double t) const {
    double bw = INFINITY;
    for (std::uint32_t i = 0; i < n; ++i) bw = std::min(bw, s.classes[class_of_[i]].bandwidth_at(t));
    return bw;
  }
  double max_ring_latency() const {
    double lat = 0;
    for (std::uint32_t i = 0; i < n && n > 1; ++i) lat = std::max(lat, net->latency(i, (i + 1) % n));
    return lat;
  }
  // One ring all-reduce starting at virtual time t (the rate of its start holds throughout).
  double allreduce_time(double t = 0) const {
    if (n <= 1) return 0;
    const double k = static_cast<double>(n - 1);
    return 2 * k / n * static_cast<double>(B) / min_bandwidth(t) + 2 * k * max_ring_latency();
  }
  double server_bw() const { return s.server_bandwidth > 0 ? s.server_bandwidth : s.classes[0].bandwidth; }
  double server_latency() const { return s.latency; }

  bool stop() const {
    return (R > 0 && round >= R) || (s.duration > 0 && now >= s.duration) || (s.loop.duration_s > 0 && now >= s.loop.duration_s);
  }

  // ---------------------------------------------------------------- samples
  // Rows for every sample time before `t` (the state is the one they see), then the clock.
  void advance_to(double t) {
    while (next_sample < t && (s.duration <= 0 || next_sample <= s.duration)) {
      record(next_sample);
      next_sample += s.sample_every;
    }
    now = t;
  }
  void record(double t) {
    if (!state_changed && !samples.empty()) {
      Sample r = samples.back();
      r.time = t;
      r.bytes = totals.bytes;
      r.exchanges = totals.exchanges;
      samples.push_back(r);
      return;
    }
    samples.push_back(compute_sample(t));
    state_changed = false;
  }
  Sample compute_sample(double t) {
    Sample r;
    r.time = t;
    r.peers = n;
    r.bytes = totals.bytes;
    r.exchanges = totals.exchanges;
    sample_consensus(
        r, n, [&](std::size_t i) { return std::span<const float>(peers[i]->params()); },
        [&](std::size_t i) { return static_cast<double>(peer_steps(static_cast<std::uint32_t>(i))); }, xbar);
    // The model the run would deliver: the server's for the server algorithms (the workers'
    // copies lag it), DiLoCo's outer model, else the peers' average.
    if (is_server(s.algorithm)) {
      xbar.assign(theta.begin(), theta.end());
    } else if (s.algorithm == Algorithm::Diloco) {
      xbar = outer;
    }
    sample_mean_model(r, *work, s.workload == WorkloadKind::Quadratic, xbar, xbar_f);
    sample_peer_models(r, s.eval_peers, n, [&](std::size_t i) { return work->evaluate(peers[i]->params()); });
    return r;
  }
  std::uint64_t peer_steps(std::uint32_t i) const {
    if (s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp) return ps_clock[i];
    if (is_server(s.algorithm)) return server_steps;
    return s.training ? peers[i]->steps() : round;
  }

  // ---------------------------------------------------------------- rounds
  bool comm_round() const {
    if (is_server(s.algorithm)) return true;
    return (round + 1) % s.loop.gossip.local_steps == 0;
  }

  // Each peer's message of a D-PSGD / SGP round to its out-neighbours, leaving at send_at[j];
  // returns when each peer has everything it waits for.
  std::vector<double> transfers(const Graph& g, const std::vector<double>& send_at, std::uint64_t bytes) {
    std::vector<double> ready(n, 0.0);
    for (std::uint32_t j = 0; j < n; ++j)
      for (auto i : g.out[j]) {
        const double at = net->transmit(j, i, bytes, send_at[j]);
        RUMOR_CHECK(at >= 0, "no loss outside gossip");
        ready[i] = std::max(ready[i], at);
        totals.bytes += bytes;
        ++totals.messages;
      }
    return ready;
  }

  // x_i <- sum_j W_ij x_j over the peers' float parameters (accumulated in double).
  void mix_params(const Mixing& w) {
    std::vector<double> acc(P);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (const auto& [j, v] : w[i]) {
        const float* x = peers[j]->params().data();
        for (std::size_t k = 0; k < P; ++k) acc[k] += v * x[k];
      }
      for (std::size_t k = 0; k < P; ++k) next[i][k] = static_cast<float>(acc[k]);
    }
    for (std::uint32_t i = 0; i < n; ++i) std::copy(next[i].begin(), next[i].end(), peers[i]->params().begin());
  }

  void push_sum(const Mixing& w) {
    std::vector<std::vector<double>> nn(n, std::vector<double>(P, 0.0));
    std::vector<double> nw(n, 0.0);
    for (std::uint32_t i = 0; i < n; ++i)
      for (const auto& [j, v] : w[i]) {
        for (std::size_t k = 0; k < P; ++k) nn[i][k] += v * num[j][k];
        nw[i] += v * weight[j];
      }
    num.swap(nn);
    weight.swap(nw);
    for (std::uint32_t i = 0; i < n; ++i) {
      auto z = peers[i]->params();
      for (std::size_t k = 0; k < P; ++k) z[k] = static_cast<float>(num[i][k] / weight[i]);
    }
  }

  void local_step(std::uint32_t i) {
    if (s.algorithm == Algorithm::Sgp) {
      // SGP: x_i <- x_i + (the optimizer's displacement of z_i), then z_i = x_i / w_i.
      auto z = peers[i]->params();
      grad_tmp.assign(z.begin(), z.end());
      peers[i]->compute_gradient();
      peers[i]->apply_gradient();
      for (std::size_t k = 0; k < P; ++k) num[i][k] += static_cast<double>(z[k]) - grad_tmp[k];
      for (std::size_t k = 0; k < P; ++k) z[k] = static_cast<float>(num[i][k] / weight[i]);
      return;
    }
    peers[i]->compute_gradient();
    peers[i]->apply_gradient();
  }

  void average_into(std::vector<double>& mean) {
    mean.assign(P, 0.0);
    for (std::uint32_t i = 0; i < n; ++i) {
      const float* x = peers[i]->params().data();
      for (std::size_t k = 0; k < P; ++k) mean[k] += x[k];
    }
    for (auto& v : mean) v /= n;
  }

  void allreduce_bytes() {
    // Ring all-reduce: 2(n-1) messages of B/n bytes per peer.
    if (n <= 1) return;
    totals.bytes += 2ull * (n - 1) * B;
    totals.messages += 2ull * n * (n - 1);
  }

  void run_round();  // algorithms_rounds.cpp

  // The synchronous server's round: pushes through its one receive side (in the order they are
  // ready), the update, then the pulls through its one send side.
  double ps_sync_time(const std::vector<double>& start, const std::vector<double>& c);  // algorithms_servers.cpp

  // ---------------------------------------------------------------- asynchronous servers
  struct Ev {
    double t;
    std::uint64_t seq;
    int kind;  // 0: gradient ready at the worker, 1: gradient arrives at the server, 2: model arrives at the worker
    std::uint32_t w;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  void run_async();  // algorithms_servers.cpp

  // ---------------------------------------------------------------- evaluations
  // output.peer_evals = on (the round algorithms): the workers evaluate as a DDP script's ranks
  // do (bench/testbed_ddp.py): those in output.train_evals (all by default) before the first
  // round, and every loop.eval_every rounds (0: each epoch) while rounds remain, each holding
  // its worker for its class's eval_time, so that the next synchronous round waits for it (DDP's
  // rank 0 evaluating holds every rank at the next all-reduce); then every worker once at the
  // end. Each evaluation's "eval" event is at its end, when a real rank writes its line; each
  // worker's "done" event carries its final test accuracy and a 1/n share of the bytes.
  bool evaluates_in_training(std::uint32_t i) const {
    return !s.train_evals || std::binary_search(s.train_evals->begin(), s.train_evals->end(), i);
  }
  bool evaluations_due() const {
    const std::uint64_t every = s.loop.eval_every ? s.loop.eval_every : rounds_per_epoch;
    return every > 0 && round % every == 0 && !stop();
  }
  void evaluate_workers(bool last) {
    double end = now;
    const double epochs = rounds_per_epoch ? static_cast<double>(round) / static_cast<double>(rounds_per_epoch) : 0.0;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!last && !evaluates_in_training(i)) continue;
      const EvalResult r = work->evaluate(peers[i]->params());
      clock[i] = std::max(clock[i], now) + s.classes[class_of_[i]].eval_time;
      event(clock[i], i, "eval", "", peer_steps(i), r.accuracy, fmt::format("loss={:.6f} epoch={:.4f}", r.loss, epochs));
      if (last)
        event(clock[i], i, "done", "", peer_steps(i), clock[i] - s.classes[class_of_[i]].start,
              fmt::format("test_acc={:.6f} loss={:.6f} bytes_sent={}", r.accuracy, r.loss, totals.bytes / n));
      end = std::max(end, clock[i]);
    }
    if (last) advance_to(end);
  }

  void run() {
    if (s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp) {
      run_async();
    } else {
      if (s.peer_evals) evaluate_workers(false);
      while (!stop()) {
        run_round();
        if (s.peer_evals && evaluations_due()) evaluate_workers(false);
      }
      if (s.peer_evals) evaluate_workers(true);
    }
    // The last rows: every sample time up to now, and one at the end.
    advance_to(now);
    if (samples.empty() || samples.back().time < now) samples.push_back(compute_sample(now));
    totals.events = s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp ? server_steps : round;
    event(now, -1, "done", "", round, samples.back().test_acc, "");
  }
};

}  // namespace rumor::sim
