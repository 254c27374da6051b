// Outer momentum for gossip: see core/outer.hpp.
#include "core/outer.hpp"

#include <algorithm>

namespace rumor {

void OuterOptimizer::begin(std::span<const float> x) {
  if (!c_.enabled()) return;
  anchor_.assign(x.begin(), x.end());
  velocity_.assign(x.size(), 0.0f);
}

void OuterOptimizer::end() {
  anchor_ = {};
  velocity_ = {};
}

void OuterOptimizer::step(std::span<float> x, std::size_t lo, std::size_t len) {
  if (!active() || x.size() != anchor_.size() || lo + len > x.size()) return;
  const double eta = c_.lr, mu = c_.momentum;
  const bool nesterov = c_.nesterov;
  float* a = anchor_.data() + lo;
  float* v = velocity_.data() + lo;
  float* p = x.data() + lo;
  const std::size_t n = len;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const double delta = static_cast<double>(a[i]) - p[i];
    const double vel = mu * v[i] + delta;
    const double upd = nesterov ? delta + mu * vel : vel;
    const float next = static_cast<float>(a[i] - eta * upd);
    v[i] = static_cast<float>(vel);
    p[i] = next;
  }
  ++steps_;
}

void OuterOptimizer::rebase(std::span<const float> x, std::size_t lo, std::size_t len) {
  if (!active() || x.size() != anchor_.size() || lo + len > x.size()) return;
  std::copy(x.begin() + static_cast<std::ptrdiff_t>(lo), x.begin() + static_cast<std::ptrdiff_t>(lo + len),
            anchor_.begin() + static_cast<std::ptrdiff_t>(lo));
}

}  // namespace rumor
