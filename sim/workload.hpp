// What the simulated peers compute. The math is really executed: a study's accuracy and loss
// curves come from the same Trainer (core/trainer.hpp) that rumor-peer runs, or from a noisy
// quadratic whose statistics are known in closed form (for the theory checks of docs/sim.md).
//
//   model      core's models ("mlp:256,128", "logreg", "linreg") on a data set loaded once
//              (Fashion-MNIST IDX files or "synthetic"); shard k of N is exactly the one
//              `rumor-peer --shard k/N` trains on (same partition and row order).
//   quadratic  f(x) = 1/2 sum_j h_j x_j^2, h_j log-spaced in [h_min, h_max]; a step is plain SGD
//              on g = h * x + sigma * xi, xi ~ N(0, I) from the peer's own stream.
//   training off (either kind): pure averaging. Parameters start different on every peer and
//              nothing but mixing ever changes them.
//
// Contract: a PeerModel is only touched between protocol calls (the engine is single-threaded),
// and params() keeps its address for the PeerModel's life (Gossip holds a span to it).
// The data set is held once: shards are the only per-peer copies of training rows.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/rng.hpp"
#include "data/dataset.hpp"
#include "sim/scenario.hpp"

namespace rumor::sim {

class PeerModel {
 public:
  virtual ~PeerModel() = default;
  virtual std::span<float> params() = 0;
  // The two halves of a step (Trainer's); the loss of the batch. Never called with training off.
  virtual double compute_gradient() = 0;
  virtual void apply_gradient() = 0;
  virtual std::uint64_t steps() const = 0;
  virtual std::uint64_t samples() const = 0;
  virtual double epochs_done() const = 0;
  // A joiner took over the swarm's model at `step` (core's state transfer): carry on from that
  // step count, as the daemon does (Trainer::adopt_step: the schedule and --steps count from
  // it; epochs still count this peer's own samples).
  virtual void adopt_step(std::uint64_t step) = 0;
  // The gradient of the last compute_gradient(), to read and replace before apply_gradient()
  // (the synchronous baselines, sim/algorithms.hpp). In double: the quadratic keeps it so.
  virtual void get_gradient(std::vector<double>& g) const = 0;
  virtual void set_gradient(std::span<const double> g) = 0;
  // The schedule follows this progress of a swarm-wide budget (Trainer::follow_progress).
  virtual void follow_progress(double) {}
  // The schedule's rate is multiplied by this (PeerLoop::lr_scale).
  virtual void scale_lr(double) {}
};

class Workload {
 public:
  // Loads data (model kind) and prepares `ids` shards. Throws DataError / std::invalid_argument
  // with a readable reason.
  Workload(const Scenario& s, std::uint32_t ids);
  ~Workload();

  // Peer `index`'s model, in its `life`-th life (restarts start afresh).
  std::unique_ptr<PeerModel> make_peer(std::uint32_t index, std::uint32_t life);

  std::size_t param_count() const { return param_count_; }
  const std::string& fingerprint() const { return fingerprint_; }
  bool classification() const;
  // Loss and accuracy of any parameter vector on the evaluation rows (all of the test set, or
  // eval_rows of it drawn from the seed). Quadratic: f(x), accuracy 0.
  EvalResult evaluate(std::span<const float> params);
  // f(x) in double, for the quadratic (the average model is computed in double).
  double quadratic_loss(std::span<const double> x) const;
  // The closed-form stationary expectation of f(mean of n peers' x) when n peers run SGD with
  // step lr and noise sigma, one step at a time, and mixing conserves their sum (docs/sim.md,
  // check 2): sum_j lr sigma^2 / (2n (2 - lr h_j / n)).
  double quadratic_stationary_loss(std::uint32_t n) const;
  const std::vector<double>& curvature() const { return h_; }
  // Rows each shard has (0 for the quadratic), for steps-per-epoch arithmetic.
  std::size_t shard_rows(std::uint32_t index) const;
  // The rows of the whole training set (0 without data): workload.swarm_epochs counts passes
  // over it.
  std::uint64_t train_set_rows() const { return train_set_rows_; }
  // A swarm-wide budget with a decaying schedule: the schedule follows the swarm's progress.
  bool follows_swarm() const { return follows_swarm_; }
  // The peers' optimizer and schedule (peer `index`'s), for an optimizer outside a PeerModel
  // (a parameter server's). The quadratic's peers run plain SGD: sgd without momentum.
  OptimizerConfig optimizer_config() const;
  ScheduleConfig schedule_config(std::uint32_t index) const;

 private:
  const Scenario& s_;
  std::uint32_t ids_;
  std::size_t param_count_ = 0;
  std::string fingerprint_;
  std::uint64_t train_set_rows_ = 0;
  bool follows_swarm_ = false;
  Rng root_;
  // model kind
  std::vector<std::shared_ptr<const Dataset>> shards_;
  std::size_t input_dim_ = 0, output_dim_ = 0;
  Dataset eval_set_;
  std::unique_ptr<Model> eval_model_;
  // quadratic
  std::vector<double> h_;
};

}  // namespace rumor::sim
