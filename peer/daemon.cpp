#include "peer/daemon.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/trainer.hpp"
#include "peer/data_files.hpp"
#include "peer/metrics.hpp"

namespace rumor::peer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

Daemon::Daemon(Config cfg, std::shared_ptr<spdlog::logger> log) : cfg_(std::move(cfg)), log_(std::move(log)) {}
Daemon::~Daemon() = default;

int Daemon::run() {
  if (cfg_.device != "cpu")
    throw std::invalid_argument("--device " + cfg_.device + ": this build only has the cpu backend");
  set_math_threads(cfg_.threads);
  MetricsWriter metrics(cfg_.metrics_path);

  const auto t_load = Clock::now();
  Task task = load_task(cfg_.data);
  const ShardSpec shard_spec = ShardSpec::parse(cfg_.shard);
  const Partition partition = Partition::parse(cfg_.partition);
  auto shard = std::make_shared<Dataset>(take_shard(std::move(task.train), shard_spec, partition, cfg_.seed));
  const std::size_t outputs = shard->classes > 0 ? static_cast<std::size_t>(shard->classes) : shard->target_dim;
  TrainerConfig tc;
  tc.model = cfg_.model;
  tc.optimizer = cfg_.optimizer;
  tc.schedule = cfg_.schedule;
  tc.batch = cfg_.batch;
  tc.seed = cfg_.seed;
  const std::uint64_t steps_per_epoch = (shard->rows + cfg_.batch - 1) / cfg_.batch;
  if (tc.schedule.kind == "cosine" && tc.schedule.total_steps == 0)
    tc.schedule.total_steps = cfg_.steps ? cfg_.steps
                                         : static_cast<std::uint64_t>(std::ceil(cfg_.epochs * steps_per_epoch));
  Trainer trainer(tc, shard, shard->dim, outputs);
  log_->info("{}: {} rows ({} partition), test {} rows, model {} ({} parameters), {} lr {} batch {}; loaded in {:.1f} s",
             shard->name, shard->rows, partition.str(), task.test.rows,
             trainer.model().fingerprint(), trainer.model().param_count(), trainer.optimizer().name(),
             cfg_.schedule.base_lr, cfg_.batch, seconds_since(t_load));

  const auto t_start = Clock::now();
  double train_seconds = 0;      // time spent in steps, for samples/s
  double interval_seconds = 0;   // since the last evaluation
  std::uint64_t interval_samples = 0;
  EvalResult last;
  auto evaluate = [&](const char* why) {
    last = trainer.evaluate(task.test);
    const double sps = interval_seconds > 0 ? static_cast<double>(interval_samples) / interval_seconds : 0.0;
    log_->info("epoch {:.2f} step {} loss {:.4f} test_acc {:.4f} samples/s {:.0f} peers 1 sent 0.0 MB{}",
               trainer.epochs_done(), trainer.steps(), last.loss, last.accuracy, sps, why);
    metrics.write("eval", {{"step", trainer.steps()},
                           {"epoch", trainer.epochs_done()},
                           {"loss", last.loss},
                           {"test_acc", last.accuracy},
                           {"samples_per_s", sps},
                           {"bytes_sent", std::uint64_t{0}},
                           {"bytes_recv", std::uint64_t{0}},
                           {"exchanges", std::uint64_t{0}},
                           {"peers", std::uint64_t{1}}});
    interval_seconds = 0;
    interval_samples = 0;
  };
  auto finished = [&] {
    if (cfg_.steps && trainer.steps() >= cfg_.steps) return true;
    if (cfg_.duration_s > 0 && seconds_since(t_start) >= cfg_.duration_s) return true;
    if (cfg_.epochs > 0 && trainer.epochs_done() >= cfg_.epochs - 1e-9) return true;
    return false;
  };

  evaluate("");
  std::uint64_t next_epoch_eval = 1;
  while (!finished() && !stop_.load(std::memory_order_relaxed)) {
    const auto t0 = Clock::now();
    const double loss = trainer.step();
    const double dt = seconds_since(t0);
    train_seconds += dt;
    interval_seconds += dt;
    interval_samples += cfg_.batch;
    if (!std::isfinite(loss)) {
      log_->error("training diverged at step {} (loss {}); lower --lr", trainer.steps(), loss);
      metrics.write("diverged", {{"step", trainer.steps()}});
      return 1;
    }
    const bool due = cfg_.eval_every ? trainer.steps() % cfg_.eval_every == 0
                                     : trainer.epochs_done() >= static_cast<double>(next_epoch_eval) - 1e-9;
    if (due && !finished()) {
      evaluate("");
      if (!cfg_.eval_every) next_epoch_eval = static_cast<std::uint64_t>(std::floor(trainer.epochs_done() + 1e-9)) + 1;
    }
  }
  if (stop_.load()) log_->info("stop requested: finishing at step {}", trainer.steps());
  interval_seconds = interval_seconds > 0 ? interval_seconds : 0;
  evaluate(" (final)");
  const double sps = train_seconds > 0 ? static_cast<double>(trainer.samples()) / train_seconds : 0.0;
  metrics.write("done", {{"steps", trainer.steps()},
                         {"test_acc", last.accuracy},
                         {"loss", last.loss},
                         {"samples_per_s", sps},
                         {"wall_s", seconds_since(t_start)},
                         {"bytes_sent", std::uint64_t{0}},
                         {"bytes_recv", std::uint64_t{0}}});
  log_->info("done: {} steps in {:.1f} s, test_acc {:.4f}, {:.0f} samples/s", trainer.steps(),
             seconds_since(t_start), last.accuracy, sps);
  return 0;
}

}  // namespace rumor::peer
