// The parameter-server baselines: the synchronous server's round time, and the asynchronous and
// SSP servers as an event loop over the workers (docs/sim.md, "Algorithms").
#include "core/timed_queue.hpp"
#include "sim/algorithms_impl.hpp"

namespace rumor::sim {

// The synchronous server's round: pushes through its one receive side (in the order they are
// ready), the update, then the pulls through its one send side.
double AlgorithmRun::Impl::ps_sync_time(const std::vector<double>& start, const std::vector<double>& c) {
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

struct Ev {
  double t;
  std::uint64_t seq;
  int kind;  // 0: gradient ready at the worker, 1: gradient arrives at the server, 2: model arrives at the worker
  std::uint32_t w;
};

void AlgorithmRun::Impl::run_async() {
  const double bw = server_bw(), lat = server_latency();
  const double bound = s.algorithm == Algorithm::PsSsp ? s.ps_staleness : INFINITY;
  TimedQueue<Ev> q;  // the simulator's queue (core/timed_queue.hpp): same tie rule
  std::vector<char> waiting(n, 0);
  std::vector<double> wait_since(n, 0.0);
  double in_free = 0, out_free = 0;
  std::uint64_t version = 0;
  std::vector<std::vector<double>> grads(n);
  const auto link_time = [&](std::uint32_t w) {
    return static_cast<double>(B) / std::min(bw, s.classes[class_of_[w]].bandwidth);
  };
  const auto start_step = [&](std::uint32_t w, double t) {
    q.push({t + step_time(w, t), 0, 0, w});
  };
  const auto min_clock = [&] { return *std::min_element(ps_clock.begin(), ps_clock.end()); };
  // The server sends its current model to w (a snapshot now; it arrives after the queue).
  const auto send_model = [&](std::uint32_t w, double t) {
    std::copy(theta.begin(), theta.end(), peers[w]->params().begin());
    ps_version[w] = version;
    out_free = std::max(t, out_free) + link_time(w);
    q.push({out_free + lat, 0, 2, w});
    totals.bytes += B;
    ++totals.messages;
  };
  const auto may_step = [&](std::uint32_t w) {
    return static_cast<double>(ps_clock[w]) <= static_cast<double>(min_clock()) + bound;
  };
  for (std::uint32_t w = 0; w < n; ++w) start_step(w, s.classes[class_of_[w]].start);  // once loaded
  std::uint32_t finished = 0;
  while (!q.empty() && finished < n) {
    const Ev e = q.pop();
    if (s.duration > 0 && e.t > s.duration) break;
    advance_to(e.t);
    if (e.kind == 0) {
      // The gradient at the model w holds, pushed through the server's receive side.
      peers[e.w]->compute_gradient();
      peers[e.w]->get_gradient(grads[e.w]);
      const double begin = std::max(e.t, in_free);
      in_free = begin + link_time(e.w);
      q.push({in_free + lat, 0, 1, e.w});
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

}  // namespace rumor::sim
