// Local training of one peer: a model, its flat parameters and gradient, an optimizer, a
// learning-rate schedule and this peer's shard walked in shuffled mini-batches.
//
// The daemon and the simulator both drive a Trainer one step at a time; the gossip protocol
// reads and mixes `params()` between steps (never during one).
//
// Backends (core/backend.hpp). On the CPU (the default) params() is the model's own memory
// and nothing below costs anything. On a device backend the parameters, the gradient, the
// optimizer state and the shard are resident on the device, and params() is a host mirror in
// the backend's fast (pinned) host memory:
//  - the mirror is current whenever the caller holds control: after construction and after
//    every apply_gradient() (which ends by copying the parameters device -> mirror), and
//    between compute_gradient() and apply_gradient() (the gradient step does not change them);
//  - whoever writes into params() (mixing, a state transfer, a resume) calls params_written();
//    the next compute_gradient(), apply_gradient() or evaluate() then copies mirror -> device
//    first. A write that is not announced is lost at the next step: the one rule a caller of
//    a device Trainer must keep (the daemon calls it after handling any protocol message).
//  - the optimizer state lives on the device; optimizer_state() copies it back for a
//    checkpoint, set_optimizer_state() sends it there.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/backend.hpp"
#include "core/loop_model.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "data/batch_order.hpp"
#include "data/dataset.hpp"

namespace rumor {

struct TrainerConfig {
  std::string model = "mlp:256,128";
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::size_t batch = 64;
  std::uint64_t seed = 1;       // batch order
  std::uint64_t init_seed = 0;  // initial parameters (0: use `seed`)
  InitScheme init = InitScheme::He;  // how they start (model.hpp)
  std::shared_ptr<Backend> backend;  // where the math runs; null = the CPU (Eigen)
  // Keep the gathered batch's buffers between steps (no allocation per step). The simulator's
  // thousands of trainers, one step at a time in one process, release them instead.
  bool keep_batch_buffers = true;
};

// Where training stands: enough to resume (checkpoints) or to start from another peer's place
// (state transfer).
struct TrainingPosition {
  std::uint64_t step = 0;          // optimizer steps taken
  std::uint64_t epoch = 0;         // completed passes over the shard
  std::uint64_t batch_pos = 0;     // row offset within the current epoch
  std::uint64_t samples = 0;       // samples processed
};

class Trainer final : public LoopModel {
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
  EvalResult evaluate(const Dataset& d);

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  // Its name(), and steps(); its state through optimizer_state() (a device keeps the live one).
  Optimizer& optimizer() { return *opt_; }
  std::span<float> params() override { return host_params_; }
  std::span<const float> params() const { return host_params_; }
  // See the top of this file: a no-op on the CPU.
  void params_written() { params_dirty_ = !host_; }
  // The gradient compute_gradient() left for apply_gradient(), CPU backend only (it throws on
  // a device); a caller may replace it in between (the simulator's all-reduce and
  // parameter-server baselines average it).
  std::span<float> gradient();
  std::span<const float> optimizer_state();
  // Throws std::invalid_argument if the size does not match (nothing changed then).
  void set_optimizer_state(std::span<const float> state, std::uint64_t steps);
  Backend& backend() { return *backend_; }
  bool on_device() const { return !host_; }
  const Dataset& shard() const { return *shard_; }
  const TrainerConfig& config() const { return cfg_; }

  TrainingPosition position() const;
  void set_position(const TrainingPosition& p);
  // A joiner takes the swarm's step (its learning-rate schedule position and clock) but keeps
  // walking its own shard from the start.
  void adopt_step(std::uint64_t step) override { step_ = step; }
  double current_lr() const {
    return lr_scale_ * (std::isnan(progress_) ? learning_rate(cfg_.schedule, step_)
                                              : learning_rate_at_progress(cfg_.schedule, step_, progress_));
  }
  // From now on the schedule's rate is multiplied by this (PeerLoop::lr_scale: the peers
  // training now over the most seen).
  void scale_lr(double factor) { lr_scale_ = factor; }
  // From now on the schedule follows this progress in [0, 1] (learning_rate_at_progress: a
  // swarm-wide budget) instead of steps out of total_steps; NaN: steps again.
  void follow_progress(double progress) { progress_ = progress; }
  std::uint64_t steps() const override { return step_; }
  std::uint64_t samples() const override { return samples_; }
  double epochs_done() const override;  // fractional epochs over this shard

 private:
  double progress_ = NAN;  // follow_progress
  double lr_scale_ = 1.0;  // scale_lr
  TrainerConfig cfg_;
  std::shared_ptr<const Dataset> shard_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::shared_ptr<Backend> backend_;
  bool host_ = true;          // the backend computes in host memory (the CPU)
  std::vector<float> params_, grad_;  // the CPU's parameters and gradient
  std::span<float> host_params_;      // params(): params_ on the CPU, the pinned mirror on a device
  // Device backends only.
  struct PinnedFloats {
    Backend* be = nullptr;
    float* p = nullptr;
    ~PinnedFloats() {
      if (be && p) be->deallocate_host(p);
    }
  } mirror_;
  bool params_dirty_ = false;  // the mirror was written since the device copy
  void sync_to_device();
  Buffer<float> dparams_, dgrad_, dstate_, dshard_x_, dshard_t_, dx_, dt_;
  Buffer<std::int32_t> dshard_y_, dy_, didx_;
  std::vector<std::int32_t> idx32_;
  std::vector<float> state_host_;
  BatchOrder order_;
  std::vector<float> bx_, bt_;
  std::vector<std::int32_t> by_;
  std::uint64_t step_ = 0, samples_ = 0;
  std::size_t batch_rows_ = 0;  // rows of the batch whose gradient is in grad_
};

}  // namespace rumor
