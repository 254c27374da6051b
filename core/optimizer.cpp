// SGD (momentum, Nesterov, L2 weight decay), Adam (L2) and AdamW (decoupled weight decay), and
// the learning-rate schedules. The optimizer works out the update's coefficients on the host;
// the pass over params, grad and state (memory-bound, one pass) is the backend's
// (core/backend_cpu.cpp on the CPU, a CUDA kernel on a GPU).
#include "core/optimizer.hpp"

#include "core/backend.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace rumor {

void Optimizer::set_state(std::span<const float> state, std::uint64_t steps) {
  if (state.size() != state_.size())
    throw std::invalid_argument(name() + ": optimizer state has " + std::to_string(state.size()) +
                                " values, expected " + std::to_string(state_.size()));
  state_.assign(state.begin(), state.end());
  steps_ = steps;
}

void Optimizer::step(std::span<float> params, std::span<const float> grad, double lr) {
  CpuBackend cpu;  // stateless: the host loops
  step(cpu, params.data(), grad.data(), state_.data(), lr);
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, std::size_t n) : c_(c), n_(n) {
    if (c.momentum != 0.0) state_.assign(n, 0.0f);
  }
  std::string name() const override { return c_.nesterov ? "sgd-nesterov" : "sgd"; }
  using Optimizer::step;
  void step(Backend& be, float* params, const float* grad, float* state, double lr) override {
    SgdUpdate u;
    u.lr = static_cast<float>(lr);
    u.weight_decay = static_cast<float>(c_.weight_decay);
    u.momentum = static_cast<float>(c_.momentum);
    u.nesterov = c_.nesterov;
    be.sgd_update(params, grad, state_.empty() ? nullptr : state, n_, u);
    ++steps_;
  }

 private:
  OptimizerConfig c_;
  std::size_t n_;
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, std::size_t n, bool decoupled) : c_(c), n_(n), decoupled_(decoupled) {
    state_.assign(2 * n, 0.0f);  // [m | v]
  }
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  using Optimizer::step;
  void step(Backend& be, float* params, const float* grad, float* state, double lr) override {
    ++steps_;
    const double t = static_cast<double>(steps_);
    const double bc1 = 1.0 - std::pow(c_.beta1, t), bc2 = 1.0 - std::pow(c_.beta2, t);
    // p -= lr * mhat / (sqrt(vhat) + eps), folded: step = lr / bc1, denom = sqrt(v / bc2) + eps.
    AdamUpdate u;
    u.step = static_cast<float>(lr / bc1);
    u.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    u.beta1 = static_cast<float>(c_.beta1);
    u.beta2 = static_cast<float>(c_.beta2);
    u.eps = static_cast<float>(c_.eps);
    u.weight_decay = static_cast<float>(c_.weight_decay);
    u.decay = decoupled_ ? static_cast<float>(1.0 - lr * c_.weight_decay) : 1.0f;
    u.decoupled = decoupled_;
    be.adam_update(params, grad, state, state + n_, n_, u);
  }

 private:
  OptimizerConfig c_;
  std::size_t n_;
  bool decoupled_;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::size_t n) {
  require(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "weight decay must be >= 0");
  if (c.kind == "sgd") {
    require(c.momentum >= 0 && c.momentum < 1, "momentum must be in [0, 1)");
    require(!c.nesterov || c.momentum > 0, "Nesterov needs momentum > 0");
    return std::make_unique<Sgd>(c, n);
  }
  if (c.kind == "adam" || c.kind == "adamw") {
    require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "Adam betas must be in [0, 1)");
    require(c.eps > 0, "Adam eps must be > 0");
    return std::make_unique<Adam>(c, n, c.kind == "adamw");
  }
  throw std::invalid_argument("unknown optimizer '" + c.kind + "': expected adam, adamw or sgd");
}

void validate(const ScheduleConfig& s) {
  require(std::isfinite(s.base_lr) && s.base_lr >= 0, "learning rate must be a finite number >= 0");
  require(s.min_lr >= 0 && s.min_lr <= s.base_lr, "min learning rate must be in [0, lr]");
  require(s.kind == "constant" || s.kind == "warmup" || s.kind == "cosine" || s.kind == "wsd",
          "unknown schedule '" + s.kind + "': expected constant, warmup, cosine or wsd");
  require(s.decay_fraction >= 0 && s.decay_fraction <= 1, "decay fraction must be in [0, 1]");
}

double learning_rate_at_progress(const ScheduleConfig& s, std::uint64_t step, double progress) {
  if (s.kind != "constant" && s.warmup_steps > 0 && step < s.warmup_steps)
    return s.base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double p = std::clamp(progress, 0.0, 1.0);
  if (s.kind == "cosine") return s.min_lr + 0.5 * (s.base_lr - s.min_lr) * (1.0 + std::cos(std::numbers::pi * p));
  if (s.kind == "wsd") {
    const double start = 1.0 - s.decay_fraction;
    if (p < start || s.decay_fraction <= 0) return p >= 1.0 ? s.min_lr : s.base_lr;
    return s.min_lr + (s.base_lr - s.min_lr) * (1.0 - p) / s.decay_fraction;
  }
  return s.base_lr;
}

double learning_rate(const ScheduleConfig& s, std::uint64_t step) {
  if (s.kind != "constant" && s.warmup_steps > 0 && step < s.warmup_steps)
    return s.base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.kind == "cosine") {
    if (s.total_steps <= s.warmup_steps) return s.base_lr;
    if (step >= s.total_steps) return s.min_lr;
    const double progress = static_cast<double>(step - s.warmup_steps) /
                            static_cast<double>(s.total_steps - s.warmup_steps);
    return s.min_lr + 0.5 * (s.base_lr - s.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
  }
  if (s.kind == "wsd") {
    if (s.total_steps <= s.warmup_steps) return s.base_lr;
    if (step >= s.total_steps) return s.min_lr;
    // The decay starts round(decay_fraction x total) steps before the end (never inside the
    // warm-up); examples/torch_quickstart.py's torch schedule is the same.
    const auto decay = static_cast<std::uint64_t>(std::llround(s.decay_fraction * static_cast<double>(s.total_steps)));
    const std::uint64_t start = std::max(s.warmup_steps, s.total_steps - std::min(decay, s.total_steps));
    if (step < start) return s.base_lr;
    return s.min_lr + (s.base_lr - s.min_lr) * static_cast<double>(s.total_steps - step) /
                          static_cast<double>(s.total_steps - start);
  }
  return s.base_lr;
}

}  // namespace rumor
