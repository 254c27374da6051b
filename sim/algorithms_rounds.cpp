// The round-based comparison algorithms: D-PSGD, SGP (push-sum), local SGD, DiLoCo, centralized
// SGD and ring all-reduce, one synchronous round at a time (docs/sim.md, "Algorithms").
#include "sim/algorithms_impl.hpp"

namespace rumor::sim {

void AlgorithmRun::Impl::run_round() {
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
      if (comm) end += allreduce_time(end);
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
        end += allreduce_time(end);
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

}  // namespace rumor::sim
