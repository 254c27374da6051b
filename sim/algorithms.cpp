// The comparison algorithms (algorithms.hpp; docs/sim.md, "Algorithms").
#include "sim/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <stdexcept>

#include "core/check.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/rng.hpp"
#include "sim/network.hpp"
#include "sim/streams.hpp"
#include "sim/workload.hpp"

namespace rumor::sim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::uint64_t kTopologyStream = (1ull << 41) + 7;  // random_regular's graph

bool is_server(Algorithm a) {
  return a == Algorithm::Centralized || a == Algorithm::AllReduce || a == Algorithm::PsSync ||
         a == Algorithm::PsAsync || a == Algorithm::PsSsp;
}

}  // namespace

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
    clock.assign(n, 0.0);
    // Steps per peer: workload.steps, else epochs of the mean shard, else until run.duration,
    // else 5 epochs (the gossip simulator's default).
    if (s.steps > 0) {
      R = s.steps;
    } else if (s.workload == WorkloadKind::Model && s.training && (s.epochs > 0 || (s.duration <= 0 && s.peer_duration <= 0))) {
      double rows = 0;
      for (std::uint32_t i = 0; i < n; ++i) rows += static_cast<double>(work->shard_rows(i));
      const double per_epoch = std::ceil(rows / n / static_cast<double>(s.batch));
      R = static_cast<std::uint64_t>(std::ceil((s.epochs > 0 ? s.epochs : 5.0) * per_epoch));
    } else if (s.duration <= 0 && s.peer_duration <= 0) {
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
    events += format("%.6f,%s,%s,%s,%llu,%.9g,%s\n", t, peer < 0 ? "" : ("p" + std::to_string(peer)).c_str(), what,
                     other.c_str(), static_cast<unsigned long long>(clk), value, detail.c_str());
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

  double min_bandwidth() const {
    double bw = INFINITY;
    for (std::uint32_t i = 0; i < n; ++i) bw = std::min(bw, s.classes[class_of_[i]].bandwidth);
    return bw;
  }
  double max_ring_latency() const {
    double lat = 0;
    for (std::uint32_t i = 0; i < n && n > 1; ++i) lat = std::max(lat, net->latency(i, (i + 1) % n));
    return lat;
  }
  double allreduce_time() const {
    if (n <= 1) return 0;
    const double k = static_cast<double>(n - 1);
    return 2 * k / n * static_cast<double>(B) / min_bandwidth() + 2 * k * max_ring_latency();
  }
  double server_bw() const { return s.server_bandwidth > 0 ? s.server_bandwidth : s.classes[0].bandwidth; }
  double server_latency() const { return s.latency; }

  bool stop() const {
    return (R > 0 && round >= R) || (s.duration > 0 && now >= s.duration) || (s.peer_duration > 0 && now >= s.peer_duration);
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
    std::fill(xbar.begin(), xbar.end(), 0.0);
    double steps = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const float* x = peers[i]->params().data();
      for (std::size_t j = 0; j < P; ++j) xbar[j] += x[j];
      steps += static_cast<double>(peer_steps(i));
    }
    for (auto& v : xbar) v /= n;
    double dev = 0, norm = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const float* x = peers[i]->params().data();
      for (std::size_t j = 0; j < P; ++j) {
        const double d = x[j] - xbar[j];
        dev += d * d;
      }
    }
    for (double v : xbar) norm += v * v;
    r.mean_step = steps / n;
    r.spread = std::sqrt(dev / n);
    r.consensus_distance = norm > 0 ? r.spread / std::sqrt(norm) : (dev > 0 ? INFINITY : 0.0);
    // The model the run would deliver: the server's for the server algorithms (the workers'
    // copies lag it), DiLoCo's outer model, else the peers' average.
    if (is_server(s.algorithm)) {
      xbar.assign(theta.begin(), theta.end());
    } else if (s.algorithm == Algorithm::Diloco) {
      xbar = outer;
    }
    if (s.workload == WorkloadKind::Quadratic) {
      r.loss = work->quadratic_loss(xbar);
      r.test_acc = 0;
    } else {
      xbar_f.assign(xbar.begin(), xbar.end());
      const EvalResult e = work->evaluate(xbar_f);
      r.loss = e.loss;
      r.test_acc = e.accuracy;
    }
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
    return (round + 1) % s.local_steps == 0;
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

  void run_round() {
    const bool comm = comm_round();
    std::vector<double> c(n);
    for (std::uint32_t i = 0; i < n; ++i) c[i] = step_time(i, clock[i]);
    const bool training = s.training;
    switch (s.algorithm) {
      case Algorithm::Dpsgd:
      case Algorithm::Sgp: {
        if (!comm) {
          for (std::uint32_t i = 0; i < n; ++i) clock[i] += c[i];
          advance_to(*std::max_element(clock.begin(), clock.end()));
          state_changed = true;
          for (std::uint32_t i = 0; i < n; ++i)
            if (training) local_step(i);
          break;
        }
        const Graph& g = graph->at(totals.exchanges);
        const Mixing& w = mixing[totals.exchanges % mixing.size()];
        const bool cta = s.algorithm == Algorithm::Dpsgd && !s.atc;
        std::vector<double> send(n), done(n);
        for (std::uint32_t i = 0; i < n; ++i) {
          done[i] = clock[i] + c[i];  // training off: a tick of the same length
          send[i] = cta ? clock[i] : done[i];
        }
        const auto ready = transfers(g, send, s.algorithm == Algorithm::Sgp ? B + 8 : B);
        double end = 0;
        for (std::uint32_t i = 0; i < n; ++i) end = std::max({end, done[i], ready[i]});
        advance_to(end);
        state_changed = true;
        if (s.algorithm == Algorithm::Sgp) {
          if (training)
            for (std::uint32_t i = 0; i < n; ++i) local_step(i);
          push_sum(w);
        } else if (cta) {
          // CTA: the gradient at x_i, the mix of the neighbours' x_j, then the step.
          if (training)
            for (std::uint32_t i = 0; i < n; ++i) peers[i]->compute_gradient();
          mix_params(w);
          if (training)
            for (std::uint32_t i = 0; i < n; ++i) peers[i]->apply_gradient();
        } else {
          if (training)
            for (std::uint32_t i = 0; i < n; ++i) local_step(i);
          mix_params(w);
        }
        std::fill(clock.begin(), clock.end(), end);
        ++totals.exchanges;
        break;
      }
      case Algorithm::LocalSgd:
      case Algorithm::Diloco: {
        for (std::uint32_t i = 0; i < n; ++i) clock[i] += c[i];
        double end = *std::max_element(clock.begin(), clock.end());
        if (comm) end += allreduce_time();
        advance_to(end);
        state_changed = true;
        for (std::uint32_t i = 0; i < n; ++i) local_step(i);
        if (comm) {
          std::vector<double> m;
          average_into(m);
          if (s.algorithm == Algorithm::Diloco) {
            // Outer SGD on the outer gradient delta = outer - mean, with (Nesterov) momentum:
            // v <- mu v + delta; outer <- outer - eta (nesterov ? delta + mu v : v), written
            // as mean + ((1 - eta) delta - eta mu v') so that eta = 1, mu = 0 gives the mean
            // exactly (local SGD); v' is the new v (Nesterov) or the old one.
            const double eta = s.outer_lr, mu = s.outer_momentum;
            for (std::size_t k = 0; k < P; ++k) {
              const double delta = outer[k] - m[k];
              const double v_old = velocity[k];
              velocity[k] = mu * v_old + delta;
              const double look = s.outer_nesterov ? velocity[k] : v_old;
              outer[k] = m[k] + ((1 - eta) * delta - eta * mu * look);
            }
            m = outer;
          }
          for (std::uint32_t i = 0; i < n; ++i) {
            auto x = peers[i]->params();
            for (std::size_t k = 0; k < P; ++k) x[k] = static_cast<float>(m[k]);
          }
          allreduce_bytes();
          ++totals.exchanges;
          std::fill(clock.begin(), clock.end(), end);
        }
        break;
      }
      case Algorithm::Centralized:
      case Algorithm::AllReduce:
      case Algorithm::PsSync: {
        double end = 0;
        for (std::uint32_t i = 0; i < n; ++i) end = std::max(end, clock[i] + c[i]);
        if (s.algorithm == Algorithm::AllReduce) {
          end += allreduce_time();
          allreduce_bytes();
        } else if (s.algorithm == Algorithm::PsSync) {
          end = ps_sync_time(clock, c);
        }
        advance_to(end);
        state_changed = true;
        // Every worker's gradient at the common model, averaged; one step of the server's
        // optimizer (the same arithmetic for all three: only the time differs).
        grad_sum.assign(P, 0.0);
        for (std::uint32_t i = 0; i < n; ++i) {
          peers[i]->compute_gradient();
          peers[i]->get_gradient(grad_tmp);
          for (std::size_t k = 0; k < P; ++k) grad_sum[k] += grad_tmp[k];
        }
        grad_f.resize(P);
        for (std::size_t k = 0; k < P; ++k) grad_f[k] = static_cast<float>(grad_sum[k] / n);
        server_opt->step(theta, grad_f, learning_rate(server_schedule, server_steps));
        ++server_steps;
        for (auto& p : peers) std::copy(theta.begin(), theta.end(), p->params().begin());
        std::fill(clock.begin(), clock.end(), end);
        ++totals.exchanges;
        totals.steps += n;
        break;
      }
      case Algorithm::Gossip:
      case Algorithm::PsAsync:
      case Algorithm::PsSsp:
        RUMOR_CHECK(false, "not a round algorithm");
    }
    if (!is_server(s.algorithm) && training) totals.steps += n;
    ++round;
  }

  // The synchronous server's round: pushes through its one receive side (in the order they are
  // ready), the update, then the pulls through its one send side.
  double ps_sync_time(const std::vector<double>& start, const std::vector<double>& c) {
    std::vector<std::pair<double, std::uint32_t>> ready(n);
    for (std::uint32_t i = 0; i < n; ++i) ready[i] = {start[i] + c[i], i};
    std::sort(ready.begin(), ready.end());
    const double bw = server_bw(), lat = server_latency();
    double in_free = 0, updated = 0;
    for (const auto& [t, i] : ready) {
      const double begin = std::max(t, in_free);
      in_free = begin + static_cast<double>(B) / std::min(bw, s.classes[class_of_[i]].bandwidth);
      updated = std::max(updated, in_free + lat);
    }
    double out_free = updated, end = updated;
    for (std::uint32_t i = 0; i < n; ++i) {
      out_free += static_cast<double>(B) / std::min(bw, s.classes[class_of_[i]].bandwidth);
      end = std::max(end, out_free + lat);
    }
    totals.bytes += 2ull * n * B;
    totals.messages += 2ull * n;
    return end;
  }

  // ---------------------------------------------------------------- asynchronous servers
  struct Ev {
    double t;
    std::uint64_t seq;
    int kind;  // 0: gradient ready at the worker, 1: gradient arrives at the server, 2: model arrives at the worker
    std::uint32_t w;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  void run_async() {
    const double bw = server_bw(), lat = server_latency();
    const double bound = s.algorithm == Algorithm::PsSsp ? s.ps_staleness : INFINITY;
    std::priority_queue<Ev, std::vector<Ev>, std::greater<>> q;
    std::uint64_t seq = 0;
    std::vector<char> waiting(n, 0);
    std::vector<double> wait_since(n, 0.0);
    double in_free = 0, out_free = 0;
    std::uint64_t version = 0;
    std::vector<std::vector<double>> grads(n);
    const auto link_time = [&](std::uint32_t w) {
      return static_cast<double>(B) / std::min(bw, s.classes[class_of_[w]].bandwidth);
    };
    const auto start_step = [&](std::uint32_t w, double t) {
      q.push({t + step_time(w, t), seq++, 0, w});
    };
    const auto min_clock = [&] { return *std::min_element(ps_clock.begin(), ps_clock.end()); };
    // The server sends its current model to w (a snapshot now; it arrives after the queue).
    const auto send_model = [&](std::uint32_t w, double t) {
      std::copy(theta.begin(), theta.end(), peers[w]->params().begin());
      ps_version[w] = version;
      out_free = std::max(t, out_free) + link_time(w);
      q.push({out_free + lat, seq++, 2, w});
      totals.bytes += B;
      ++totals.messages;
    };
    const auto may_step = [&](std::uint32_t w) {
      return static_cast<double>(ps_clock[w]) <= static_cast<double>(min_clock()) + bound;
    };
    for (std::uint32_t w = 0; w < n; ++w) start_step(w, 0.0);
    std::uint32_t finished = 0;
    while (!q.empty() && finished < n) {
      const Ev e = q.top();
      q.pop();
      if (s.duration > 0 && e.t > s.duration) break;
      advance_to(e.t);
      if (e.kind == 0) {
        // The gradient at the model w holds, pushed through the server's receive side.
        peers[e.w]->compute_gradient();
        peers[e.w]->get_gradient(grads[e.w]);
        const double begin = std::max(e.t, in_free);
        in_free = begin + link_time(e.w);
        q.push({in_free + lat, seq++, 1, e.w});
        totals.bytes += B;
        ++totals.messages;
        ++totals.steps;
      } else if (e.kind == 1) {
        grad_f.assign(grads[e.w].begin(), grads[e.w].end());
        server_opt->step(theta, grad_f, learning_rate(server_schedule, server_steps));
        ++server_steps;
        staleness_sum += static_cast<double>(version - ps_version[e.w]);
        ++staleness_n;
        ++version;
        ++ps_clock[e.w];
        ++totals.exchanges;
        state_changed = true;
        std::uint64_t mx = 0;
        for (auto c : ps_clock) mx = std::max(mx, c);
        max_gap = std::max(max_gap, mx - min_clock());
        RUMOR_CHECK(static_cast<double>(mx - min_clock()) <= bound + 1, "the SSP bound was broken");
        if (R > 0 && ps_clock[e.w] >= R) {
          ++finished;
          event(e.t, e.w, "done", "", ps_clock[e.w], 0, "");
        } else if (may_step(e.w)) {
          send_model(e.w, e.t);
        } else {
          waiting[e.w] = 1;
          wait_since[e.w] = e.t;
          ++waits;
        }
        // A worker held back by the bound goes on once the slowest catches up.
        for (std::uint32_t w = 0; w < n; ++w)
          if (waiting[w] && may_step(w)) {
            waiting[w] = 0;
            wait_seconds += e.t - wait_since[w];
            send_model(w, e.t);
          }
      } else {
        start_step(e.w, e.t);
      }
    }
  }

  void run() {
    if (s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp) {
      run_async();
    } else {
      while (!stop()) run_round();
    }
    // The last rows: every sample time up to now, and one at the end.
    advance_to(now);
    if (samples.empty() || samples.back().time < now) samples.push_back(compute_sample(now));
    totals.events = s.algorithm == Algorithm::PsAsync || s.algorithm == Algorithm::PsSsp ? server_steps : round;
    event(now, -1, "done", "", round, samples.back().test_acc, "");
  }
};

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
  const auto u = [](std::uint64_t x) { return std::to_string(x); };
  std::string o = "{\n";
  o += "  \"scenario\": " + json_string(w.s.source) + ",\n";
  o += "  \"seed\": " + u(w.s.seed) + ",\n";
  o += "  \"algorithm\": " + json_string(algorithm_name(w.s.algorithm)) + ",\n";
  o += "  \"workload\": " + json_string(w.s.workload == WorkloadKind::Model ? w.s.model : "quadratic") + ",\n";
  o += "  \"partition\": " + json_string(w.s.partition) + ",\n";
  o += std::string("  \"training\": ") + (w.s.training ? "true" : "false") + ",\n";
  o += "  \"topology\": " + json_string(uses_topology(w.s.algorithm) ? topology_name(w.s.topology) : "none") + ",\n";
  if (w.s.algorithm == Algorithm::Dpsgd) {
    o += std::string("  \"combine\": \"") + (w.s.atc ? "atc" : "cta") + "\",\n";
    o += std::string("  \"weights\": \"") + (w.s.weights == MixingWeights::Uniform ? "uniform" : "metropolis") + "\",\n";
  }
  if (w.graph) {
    o += "  \"slem\": " + json_number(w.spectrum.slem) + ",\n";
    o += "  \"slem_per_round\": " + json_number(w.spectrum.slem_per_round) + ",\n";
    o += "  \"graph_period\": " + u(w.spectrum.period) + ",\n";
  }
  o += "  \"peers\": " + u(w.n) + ",\n";
  o += "  \"local_steps\": " + u(w.s.local_steps) + ",\n";
  o += "  \"param_count\": " + u(w.P) + ",\n";
  o += "  \"message_bytes\": " + u(w.B) + ",\n";
  o += "  \"allreduce_time\": " + json_number(w.allreduce_time()) + ",\n";
  o += "  \"virtual_time\": " + json_number(w.now) + ",\n";
  o += "  \"rounds\": " + u(w.round) + ",\n";
  o += "  \"steps\": " + u(t.steps) + ",\n";
  o += "  \"communications\": " + u(t.exchanges) + ",\n";
  o += "  \"messages\": " + u(t.messages) + ",\n";
  o += "  \"bytes\": " + u(t.bytes) + ",\n";
  o += "  \"bytes_per_peer\": " + json_number(static_cast<double>(t.bytes) / w.n) + ",\n";
  if (w.s.algorithm == Algorithm::PsAsync || w.s.algorithm == Algorithm::PsSsp) {
    o += "  \"max_clock_gap\": " + u(w.max_gap) + ",\n";
    o += "  \"mean_staleness\": " + json_number(w.staleness_n ? w.staleness_sum / static_cast<double>(w.staleness_n) : 0.0) + ",\n";
    o += "  \"waits\": " + u(w.waits) + ",\n";
    o += "  \"wait_seconds\": " + json_number(w.wait_seconds) + ",\n";
  }
  o += "  " + final_sample_json(last) + "\n";
  o += "}\n";
  return o;
}

void AlgorithmRun::write_outputs(const std::string& dir) const {
  write_run_outputs(dir, timeseries_csv(), events_csv(), summary_json());
}

}  // namespace rumor::sim
