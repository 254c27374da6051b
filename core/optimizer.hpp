// Optimizers and learning-rate schedules over flat buffers.
//
// An optimizer's whole state (momentum, Adam moments, step count) lives in one flat float
// buffer plus a step counter, laid out like the parameters, so it can be checkpointed and sent
// in a state transfer as plain bytes, and restored with set_state().
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rumor {

struct OptimizerConfig {
  std::string kind = "adam";   // "adam", "adamw", "sgd"
  double momentum = 0.9;       // sgd
  bool nesterov = false;       // sgd
  double weight_decay = 0.0;   // sgd, adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

class Backend;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of `params` from `grad` at learning rate `lr`, on the host (the CPU backend's
  // loops), with the state kept here.
  void step(std::span<float> params, std::span<const float> grad, double lr);
  // The same update through a backend: params, grad and `state` (state_size() floats, laid
  // out as state()) are in its memory. The state kept here is not touched: a caller keeping
  // it on a device copies it back with set_state() when it needs it (checkpoints).
  virtual void step(Backend& be, float* params, const float* grad, float* state, double lr) = 0;
  std::size_t state_size() const { return state_.size(); }
  virtual std::string name() const = 0;
  // State for checkpoints and state transfer.
  std::span<const float> state() const { return state_; }
  std::uint64_t steps() const { return steps_; }
  // Throws std::invalid_argument if the size does not match.
  void set_state(std::span<const float> state, std::uint64_t steps);

 protected:
  std::vector<float> state_;
  std::uint64_t steps_ = 0;
};

// Throws std::invalid_argument for an unknown kind or out-of-range hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::size_t param_count);

struct ScheduleConfig {
  // "constant", "warmup" (linear warm-up then constant), "cosine", "wsd" (warm-up, stable, decay:
  // held at base_lr, then linear to min_lr over the last decay_fraction of total_steps)
  std::string kind = "constant";
  double base_lr = 1e-3;
  std::uint64_t warmup_steps = 0;  // warmup, cosine, wsd: linear ramp from base_lr/warmup.. to base_lr
  std::uint64_t total_steps = 0;   // cosine, wsd: at min_lr from total_steps on
  double min_lr = 0.0;
  double decay_fraction = 0.3;     // wsd: the part of total_steps that decays (in [0, 1])
};

// Cosine and wsd decay over a run (total_steps, or a swarm-wide budget's progress); the others
// do not.
inline bool schedule_decays(const std::string& kind) { return kind == "cosine" || kind == "wsd"; }

// The learning rate for the step about to be taken (step counts from 0).
double learning_rate(const ScheduleConfig& s, std::uint64_t step);
// The same schedule following a run's progress in [0, 1] instead of steps out of total_steps
// (a swarm-wide budget: the swarm's samples over its target, so that a slow peer anneals with
// the swarm): cosine and wsd take their shape over progress; a warm-up still counts this
// peer's steps.
double learning_rate_at_progress(const ScheduleConfig& s, std::uint64_t step, double progress);
// Throws std::invalid_argument naming the problem.
void validate(const ScheduleConfig& s);

}  // namespace rumor
