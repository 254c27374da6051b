// Workloads: the real Trainer on shards, the noisy quadratic, and pure averaging (workload.hpp).
#include "sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/check.hpp"
#include "core/trainer.hpp"
#include "data/files.hpp"
#include "data/partition.hpp"
#include "sim/streams.hpp"

namespace rumor::sim {

namespace {

// One peer of the model workload: core's Trainer, unchanged.
class TrainerPeer final : public PeerModel {
 public:
  TrainerPeer(const TrainerConfig& tc, std::shared_ptr<const Dataset> shard, std::size_t in, std::size_t out)
      : t_(tc, std::move(shard), in, out) {}
  std::span<float> params() override { return t_.params(); }
  double compute_gradient() override { return t_.compute_gradient(); }
  void apply_gradient() override { t_.apply_gradient(); }
  std::uint64_t steps() const override { return t_.steps(); }
  std::uint64_t samples() const override { return t_.samples(); }
  double epochs_done() const override { return t_.epochs_done(); }
  void adopt_step(std::uint64_t step) override { t_.adopt_step(step); }
  void follow_progress(double p) override { t_.follow_progress(p); }
  void scale_lr(double f) override { t_.scale_lr(f); }
  void get_gradient(std::vector<double>& g) const override {
    const auto src = const_cast<Trainer&>(t_).gradient();
    g.assign(src.begin(), src.end());
  }
  void set_gradient(std::span<const double> g) override {
    auto dst = t_.gradient();
    RUMOR_CHECK(g.size() == dst.size());
    for (std::size_t j = 0; j < g.size(); ++j) dst[j] = static_cast<float>(g[j]);
  }

 private:
  Trainer t_;
};

// One peer of the noisy quadratic: SGD x <- x - lr (h * x + sigma xi).
class QuadraticPeer final : public PeerModel {
 public:
  QuadraticPeer(const std::vector<double>& h, double lr, double sigma, float x0, Rng noise)
      : h_(h), lr_(lr), sigma_(sigma), x_(h.size(), x0), g_(h.size()), noise_(noise) {}
  std::span<float> params() override { return x_; }
  double compute_gradient() override {
    double f = 0;
    for (std::size_t j = 0; j < x_.size(); ++j) {
      const double x = x_[j];
      f += 0.5 * h_[j] * x * x;
      g_[j] = h_[j] * x + sigma_ * noise_.normal();
    }
    return f;
  }
  void apply_gradient() override {
    const double lr = lr_ * scale_;
    for (std::size_t j = 0; j < x_.size(); ++j) x_[j] = static_cast<float>(x_[j] - lr * g_[j]);
    ++steps_;
  }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t samples() const override { return steps_; }
  double epochs_done() const override { return 0; }
  void adopt_step(std::uint64_t step) override { steps_ = step; }
  void scale_lr(double f) override { scale_ = f; }
  void get_gradient(std::vector<double>& g) const override { g = g_; }
  void set_gradient(std::span<const double> g) override {
    RUMOR_CHECK(g.size() == g_.size());
    std::copy(g.begin(), g.end(), g_.begin());
  }

 private:
  const std::vector<double>& h_;
  double lr_, sigma_;
  std::vector<float> x_;
  std::vector<double> g_;
  Rng noise_;
  std::uint64_t steps_ = 0;
  double scale_ = 1.0;  // scale_lr
};

// Training off: parameters that only mixing changes.
class AveragingPeer final : public PeerModel {
 public:
  explicit AveragingPeer(std::vector<float> x) : x_(std::move(x)) {}
  std::span<float> params() override { return x_; }
  double compute_gradient() override { RUMOR_CHECK(false, "training is off"); }
  void apply_gradient() override { RUMOR_CHECK(false, "training is off"); }
  std::uint64_t steps() const override { return 0; }
  std::uint64_t samples() const override { return 0; }
  double epochs_done() const override { return 0; }
  void adopt_step(std::uint64_t) override {}
  void get_gradient(std::vector<double>&) const override { RUMOR_CHECK(false, "training is off"); }
  void set_gradient(std::span<const double>) override { RUMOR_CHECK(false, "training is off"); }

 private:
  std::vector<float> x_;
};

}  // namespace

Workload::Workload(const Scenario& s, std::uint32_t ids)
    : s_(s),
      ids_(ids),
      follows_swarm_(s.workload == WorkloadKind::Model && (s.loop.swarm_samples > 0 || s.loop.swarm_epochs > 0) &&
                     schedule_decays(s.schedule)),
      root_(Rng(s.seed).fork(streams::kWorkload)) {
  if (s.loop.swarm_epochs > 0 && !s.loop.swarm_samples && s.workload != WorkloadKind::Model)
    throw std::invalid_argument("workload.swarm_epochs counts passes over a data set: it needs workload.kind = model "
                                "(use workload.swarm_samples here: a quadratic peer's step is one sample)");
  if (s.workload == WorkloadKind::Quadratic) {
    h_.resize(s.dim);
    for (std::size_t j = 0; j < s.dim; ++j) {
      const double f = s.dim > 1 ? static_cast<double>(j) / static_cast<double>(s.dim - 1) : 0.0;
      h_[j] = s.curvature_min * std::pow(s.curvature_max / s.curvature_min, f);
    }
    if (s.training)
      for (double h : h_)
        if (!(s.lr * h < 2))
          throw std::invalid_argument("workload.lr: SGD on the quadratic diverges unless lr * h < 2 (lr " +
                                      std::to_string(s.lr) + ", largest h " + std::to_string(h) + ")");
    param_count_ = s.dim;
    fingerprint_ = "quadratic:" + std::to_string(s.dim) + "/f32";
    return;
  }
  Task task = load_task(s.data);
  train_set_rows_ = task.train.rows;
  const int classes = task.train.classes;
  input_dim_ = task.train.dim;
  output_dim_ = classes > 0 ? static_cast<std::size_t>(classes) : task.train.target_dim;
  eval_model_ = make_model(s.model, input_dim_, output_dim_);
  param_count_ = eval_model_->param_count();
  fingerprint_ = eval_model_->fingerprint();
  if (s.training) {
    if (ids > task.train.rows)
      throw std::invalid_argument("cannot give " + std::to_string(ids) + " peers a shard each of " +
                                  std::to_string(task.train.rows) + " training rows");
    // Exactly rumor-peer's `--shard k/N --partition P --seed S`: the partition of take_shard,
    // rows in ascending order. Computed once for all N shards; the full set is then dropped.
    const Partition part = Partition::parse(s.partition);
    auto parts = partition_rows(task.train, static_cast<int>(ids), part, s.seed);
    shards_.resize(ids);
    for (std::uint32_t i = 0; i < ids; ++i) {
      std::sort(parts[i].begin(), parts[i].end());
      auto d = std::make_shared<Dataset>(task.train.subset(parts[i]));
      d->name = task.train.name + " shard " + std::to_string(i + 1) + "/" + std::to_string(ids);
      shards_[i] = std::move(d);
      std::vector<std::size_t>().swap(parts[i]);
    }
    task.train = Dataset{};
  }
  if (s.eval_rows > 0 && s.eval_rows < task.test.rows) {
    std::vector<std::size_t> idx(task.test.rows);
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    Rng r = Rng(s.seed).fork(streams::kEvalRows);
    r.shuffle(idx);
    idx.resize(s.eval_rows);
    std::sort(idx.begin(), idx.end());
    eval_set_ = task.test.subset(idx);
  } else {
    eval_set_ = std::move(task.test);
  }
}

Workload::~Workload() = default;

bool Workload::classification() const { return s_.workload == WorkloadKind::Model && eval_set_.classes > 0; }

std::size_t Workload::shard_rows(std::uint32_t index) const {
  return index < shards_.size() && shards_[index] ? shards_[index]->rows : 0;
}

std::unique_ptr<PeerModel> Workload::make_peer(std::uint32_t index, std::uint32_t life) {
  RUMOR_CHECK(index < ids_);
  const Rng peer_rng = root_.fork(index).fork(life);
  if (!s_.training) {
    std::vector<float> x(param_count_);
    Rng r = peer_rng;
    if (s_.init_values == "model") {
      eval_model_->init(x, r, s_.init);
    } else if (s_.init_values.rfind("bits:", 0) == 0) {
      const unsigned k = static_cast<unsigned>(std::stoul(s_.init_values.substr(5)));
      const double scale = std::ldexp(1.0, -static_cast<int>(k));
      for (auto& v : x) v = static_cast<float>(s_.init_mean + s_.init_sd * scale * static_cast<double>(r.below(1ull << k)));
    } else {
      for (auto& v : x) v = static_cast<float>(r.normal(s_.init_mean, s_.init_sd));
    }
    return std::make_unique<AveragingPeer>(std::move(x));
  }
  if (s_.workload == WorkloadKind::Quadratic)
    return std::make_unique<QuadraticPeer>(h_, s_.lr, s_.noise, static_cast<float>(s_.x0), peer_rng.fork(1));
  TrainerConfig tc;
  tc.model = s_.model;
  tc.optimizer = optimizer_config();
  tc.schedule = schedule_config(index);
  tc.batch = s_.batch;
  // rumor-peer gives every peer the swarm's --seed (batch order) and the same initial model;
  // `peer_seeds = distinct` gives each its own batch order (the initial model stays common).
  tc.seed = s_.same_seed ? s_.seed : Rng(s_.seed).fork(0x5EED0000ull + index)();
  tc.init_seed = s_.seed;
  tc.init = s_.init;
  tc.keep_batch_buffers = false;  // memory: thousands of trainers, one step at a time
  return std::make_unique<TrainerPeer>(tc, shards_[index], input_dim_, output_dim_);
}

OptimizerConfig Workload::optimizer_config() const {
  OptimizerConfig oc;
  if (s_.workload == WorkloadKind::Quadratic) {
    oc.kind = "sgd";
    oc.momentum = 0;
    return oc;
  }
  oc.kind = s_.optimizer;
  oc.momentum = s_.momentum;
  oc.weight_decay = s_.weight_decay;
  return oc;
}

ScheduleConfig Workload::schedule_config(std::uint32_t index) const {
  ScheduleConfig sc;
  sc.base_lr = s_.lr;
  if (s_.workload == WorkloadKind::Quadratic) return sc;
  sc.kind = s_.schedule;
  sc.warmup_steps = s_.warmup_steps;
  sc.decay_fraction = s_.decay_fraction;
  if (schedule_decays(s_.schedule)) {
    // rumor-peer's rule: decay over the run's steps (or epochs) unless told otherwise.
    const std::uint64_t per_epoch = (shard_rows(index) + s_.batch - 1) / s_.batch;
    sc.total_steps = s_.loop.steps ? s_.loop.steps : static_cast<std::uint64_t>(std::ceil(s_.loop.epochs * static_cast<double>(per_epoch)));
  }
  return sc;
}

EvalResult Workload::evaluate(std::span<const float> params) {
  if (s_.workload == WorkloadKind::Quadratic) {
    double f = 0;
    for (std::size_t j = 0; j < h_.size(); ++j) f += 0.5 * h_[j] * double(params[j]) * double(params[j]);
    return {f, 0.0, 1};
  }
  return eval_model_->evaluate(params, eval_set_);
}

double Workload::quadratic_loss(std::span<const double> x) const {
  double f = 0;
  for (std::size_t j = 0; j < h_.size() && j < x.size(); ++j) f += 0.5 * h_[j] * x[j] * x[j];
  return f;
}

double Workload::quadratic_stationary_loss(std::uint32_t n) const {
  double f = 0;
  // Peers step one at a time (asynchronously): each step moves the mean by lr/n of a gradient,
  // so per coordinate E xbar^2 = lr sigma^2 / (n h (2 - lr h / n)); n = 1 is plain SGD.
  for (double h : h_) f += s_.lr * s_.noise * s_.noise / (2.0 * n * (2.0 - s_.lr * h / n));
  return f;
}

}  // namespace rumor::sim
