// Trainer (trainer.hpp): construction on the CPU (buffers in their historical order, see
// core/backend_cpu.cpp) or on a device (everything resident, a pinned host mirror), gradient and
// update steps, evaluation, the mirror's sync to the device after params_written(), and the
// optimizer state and position for checkpoints. The arithmetic itself is the model's and the
// backend's.
#include "core/trainer.hpp"

#include <stdexcept>

#include "core/check.hpp"
#include "core/fpmode.hpp"

namespace rumor {

Trainer::Trainer(const TrainerConfig& cfg, std::shared_ptr<const Dataset> shard,
                 std::size_t input_dim, std::size_t output_dim)
    : cfg_(cfg),
      shard_(std::move(shard)),
      model_(make_model(cfg.model, input_dim, output_dim, cfg.backend)),
      opt_(make_optimizer(cfg.optimizer, model_->param_count())),
      backend_(cfg.backend ? cfg.backend : make_cpu_backend()),
      host_(backend_->host_memory()),
      // The CPU's buffers first, in the order they always had: Eigen's bias sums depend on
      // where the gradient lands (see core/backend_cpu.cpp), so the heap layout is kept.
      params_(host_ ? model_->param_count() : 0),
      grad_(host_ ? model_->param_count() : 0),
      order_(shard_->rows, cfg.batch, Rng(cfg.seed).fork(0x5EED).operator()()) {
  validate(cfg.schedule);
  if (shard_->dim != input_dim)
    throw std::invalid_argument("shard has " + std::to_string(shard_->dim) + " features, model expects " +
                                std::to_string(input_dim));
  const std::size_t n = model_->param_count();
  Rng init(cfg.init_seed ? cfg.init_seed : cfg.seed);
  if (host_) {
    host_params_ = params_;
    model_->init(params_, init, cfg.init);
    return;
  }
  // A device: the mirror in pinned host memory; parameters, gradient, optimizer state and the
  // whole shard resident on the device (a batch is then an index upload and a gather).
  Backend& be = *backend_;
  mirror_.be = &be;
  mirror_.p = static_cast<float*>(be.allocate_host(n * sizeof(float)));
  host_params_ = std::span<float>(mirror_.p, n);
  model_->init(host_params_, init, cfg.init);
  for (auto* b : {&dparams_, &dgrad_, &dstate_, &dshard_x_, &dshard_t_, &dx_, &dt_}) b->bind(be);
  for (auto* b : {&dshard_y_, &dy_, &didx_}) b->bind(be);
  dparams_.upload(host_params_);
  dgrad_.reserve(n);
  dstate_.upload(opt_->state());
  dshard_x_.upload(shard_->x);
  if (shard_->classes > 0) {
    for (std::int32_t y : shard_->labels)
      if (y < 0 || static_cast<std::size_t>(y) >= output_dim)
        throw std::invalid_argument("shard label " + std::to_string(y) + " outside the model's " +
                                    std::to_string(output_dim) + " classes");
    dshard_y_.upload(shard_->labels);
  } else {
    dshard_t_.upload(shard_->targets);
  }
  be.synchronize();  // the host data above may be freed or changed by the caller now
}

void Trainer::sync_to_device() {
  if (!params_dirty_) return;
  dparams_.upload(host_params_);
  params_dirty_ = false;
}

double Trainer::compute_gradient() {
  const auto idx = order_.next();
  batch_rows_ = idx.size();
  if (host_) {
    const FlushDenormals ftz;  // core/fpmode.hpp: a subnormal costs a microcode assist
    gather_batch(*shard_, idx, bx_, by_, bt_);
    const double loss = model_->loss_and_grad(params_, bx_.data(), idx.size(), by_.empty() ? nullptr : by_.data(),
                                              bt_.empty() ? nullptr : bt_.data(), grad_);
    if (!cfg_.keep_batch_buffers) {
      std::vector<float>().swap(bx_);
      std::vector<std::int32_t>().swap(by_);
      std::vector<float>().swap(bt_);
    }
    return loss;
  }
  sync_to_device();
  Backend& be = *backend_;
  const std::size_t rows = idx.size();
  idx32_.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    RUMOR_CHECK(idx[i] < shard_->rows);
    idx32_[i] = static_cast<std::int32_t>(idx[i]);
  }
  didx_.upload(idx32_);  // pageable: staged by the copy itself, so idx32_ may change on return
  dx_.reserve(rows * shard_->dim);
  be.gather_rows(dshard_x_.data(), didx_.data(), rows, shard_->dim, dx_.data());
  if (shard_->classes > 0) {
    dy_.reserve(rows);
    be.gather_labels(dshard_y_.data(), didx_.data(), rows, dy_.data());
  } else {
    dt_.reserve(rows * shard_->target_dim);
    be.gather_rows(dshard_t_.data(), didx_.data(), rows, shard_->target_dim, dt_.data());
  }
  return model_->loss_and_grad_on_backend(dparams_.data(), dx_.data(), rows, dy_.data(), dt_.data(), dgrad_.data());
}

std::span<float> Trainer::gradient() {
  if (!host_) throw std::logic_error("Trainer::gradient(): the gradient lives on the device; only the CPU backend exposes it");
  return grad_;
}

void Trainer::apply_gradient() {
  const double lr = current_lr();
  if (host_) {
    const FlushDenormals ftz;
    opt_->step(params_, grad_, lr);
  } else {
    sync_to_device();
    opt_->step(*backend_, dparams_.data(), dgrad_.data(), dstate_.data(), lr);
    dparams_.download(host_params_);  // waits: the mirror is current when we return
  }
  ++step_;
  samples_ += batch_rows_;
  batch_rows_ = 0;
}

EvalResult Trainer::evaluate(const Dataset& d) {
  if (host_) {
    const FlushDenormals ftz;
    return model_->evaluate(params_, d);
  }
  sync_to_device();
  return model_->evaluate_on_backend(dparams_.data(), d);
}

std::span<const float> Trainer::optimizer_state() {
  if (!host_ && opt_->state_size() > 0) {
    state_host_.resize(opt_->state_size());
    dstate_.download(state_host_);
    opt_->set_state(state_host_, opt_->steps());
  }
  return opt_->state();
}

void Trainer::set_optimizer_state(std::span<const float> state, std::uint64_t steps) {
  opt_->set_state(state, steps);
  if (!host_) dstate_.upload(opt_->state());
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
