#include "core/trainer.hpp"

#include <stdexcept>

namespace rumor {

Trainer::Trainer(const TrainerConfig& cfg, std::shared_ptr<const Dataset> shard,
                 std::size_t input_dim, std::size_t output_dim)
    : cfg_(cfg),
      shard_(std::move(shard)),
      model_(make_model(cfg.model, input_dim, output_dim)),
      opt_(make_optimizer(cfg.optimizer, model_->param_count())),
      params_(model_->param_count()),
      grad_(model_->param_count()),
      order_(shard_->rows, cfg.batch, Rng(cfg.seed).fork(0x5EED).operator()()) {
  validate(cfg.schedule);
  if (shard_->dim != input_dim)
    throw std::invalid_argument("shard has " + std::to_string(shard_->dim) + " features, model expects " +
                                std::to_string(input_dim));
  Rng init(cfg.init_seed ? cfg.init_seed : cfg.seed);
  model_->init(params_, init);
}

double Trainer::compute_gradient() {
  const auto idx = order_.next();
  gather_batch(*shard_, idx, bx_, by_, bt_);
  batch_rows_ = idx.size();
  return model_->loss_and_grad(params_, bx_.data(), idx.size(), by_.empty() ? nullptr : by_.data(),
                               bt_.empty() ? nullptr : bt_.data(), grad_);
}

void Trainer::apply_gradient() {
  opt_->step(params_, grad_, learning_rate(cfg_.schedule, step_));
  ++step_;
  samples_ += batch_rows_;
  batch_rows_ = 0;
}

TrainingPosition Trainer::position() const {
  return {step_, order_.epoch(), order_.position(), samples_};
}

void Trainer::set_position(const TrainingPosition& p) {
  step_ = p.step;
  samples_ = p.samples;
  order_.seek(p.epoch, p.batch_pos);
}

double Trainer::epochs_done() const {
  return shard_->rows ? static_cast<double>(samples_) / static_cast<double>(shard_->rows) : 0.0;
}

}  // namespace rumor
