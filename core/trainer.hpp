// Local training of one peer: a model, its flat parameters and gradient, an optimizer, a
// learning-rate schedule and this peer's shard walked in shuffled mini-batches.
//
// The daemon and the simulator both drive a Trainer one step at a time; the gossip protocol
// reads and mixes `params()` between steps (never during one).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dataset.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"

namespace rumor {

struct TrainerConfig {
  std::string model = "mlp:256,128";
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::size_t batch = 64;
  std::uint64_t seed = 1;       // batch order
  std::uint64_t init_seed = 0;  // initial parameters (0: use `seed`)
};

// Where training stands: enough to resume (checkpoints) or to start from another peer's place
// (state transfer).
struct TrainingPosition {
  std::uint64_t step = 0;          // optimizer steps taken
  std::uint64_t epoch = 0;         // completed passes over the shard
  std::uint64_t batch_pos = 0;     // row offset within the current epoch
  std::uint64_t samples = 0;       // samples processed
};

class Trainer {
 public:
  // `shard` is the data this peer trains on; its width and classes must fit the model spec.
  Trainer(const TrainerConfig& cfg, std::shared_ptr<const Dataset> shard, std::size_t input_dim,
          std::size_t output_dim);

  // One mini-batch: forward, backward, optimizer step. Returns the batch's mean loss.
  double step() {
    const double loss = compute_gradient();
    apply_gradient();
    return loss;
  }
  // The two halves of step(). Between them the parameters are not in use, so the daemon handles
  // incoming exchanges there too (the gradient, taken at the pre-mix point, is then applied to
  // the mixed parameters: the same overlap the exchange rule already accepts).
  double compute_gradient();
  void apply_gradient();
  EvalResult evaluate(const Dataset& d) { return model_->evaluate(params_, d); }

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  std::span<float> params() { return params_; }
  // The gradient compute_gradient() left for apply_gradient(); a caller may replace it in
  // between (the simulator's all-reduce and parameter-server baselines average it).
  std::span<float> gradient() { return grad_; }
  std::span<const float> params() const { return params_; }
  const Dataset& shard() const { return *shard_; }
  const TrainerConfig& config() const { return cfg_; }

  TrainingPosition position() const;
  void set_position(const TrainingPosition& p);
  // A joiner takes the swarm's step (its learning-rate schedule position and clock) but keeps
  // walking its own shard from the start.
  void adopt_step(std::uint64_t step) { step_ = step; }
  double current_lr() const { return learning_rate(cfg_.schedule, step_); }
  std::uint64_t steps() const { return step_; }
  std::uint64_t samples() const { return samples_; }
  double epochs_done() const;  // fractional epochs over this shard

 private:
  TrainerConfig cfg_;
  std::shared_ptr<const Dataset> shard_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<float> params_, grad_;
  BatchOrder order_;
  std::vector<float> bx_, bt_;
  std::vector<std::int32_t> by_;
  std::uint64_t step_ = 0, samples_ = 0;
  std::size_t batch_rows_ = 0;  // rows of the batch whose gradient is in grad_
};

}  // namespace rumor
