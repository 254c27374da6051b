// Single-peer training throughput of Rumor, against the "GEMM-bound ceiling".
//
// rumor:   samples/s of rumor::Trainer::step() (gather_batch, forward, backward, optimizer) on
//          the real data set, exactly as the peer daemon calls it.
// ceiling: the same matrix products one training step of the model does, in plain Eigen and
//          nothing else (no bias, ReLU, softmax, gradient of the biases, optimizer or batch
//          gathering). For the MLP 784-256-128-10 those are 8 products:
//            forward   X·W1, A1·W2, A2·W3
//            backward  A2ᵀ·G3, G3·W3ᵀ, A1ᵀ·G2, G2·W2ᵀ, Xᵀ·G1
//          Row-major float matrices, `.noalias()`, same batch, same compiler flags as core/.
//
// The two sides are interleaved: each repetition warms both up, then alternates chunks of
// --chunk steps (rumor, ceiling, rumor, ceiling, ...) so that noise from other processes on the
// machine, which on a shared VM swings absolute throughput by 10-20% from one second to the
// next, hits both; the medians and the median of the per-repetition ratios are printed, by wall
// clock and by process CPU time. Everything runs on one thread.
//
// Then (unless --no-breakdown) where Rumor's step time goes: the parts of Trainer::step timed
// one by one through the same public API (BatchOrder + gather_batch, Model::loss_and_grad,
// Optimizer::step), a forward-only pass, and the ceiling's forward and backward products.
//
// Machine-readable result lines start with a key and a number, e.g.
//   rumor_samples_per_s 12345.6
// (see bench/README.md for the full list; bench/train_bench.sh reads them).
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <time.h>
#include <vector>

#include "bench/flags.hpp"
#include "data/dataset.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/rng.hpp"
#include "core/trainer.hpp"
#include "data/batch_order.hpp"
#include "data/files.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of this (single-threaded) process: unlike wall time it does not count the time the
// scheduler gives to other processes, so it is steadier on a busy machine.
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Args {
  int reps = 5;
  int steps = 300;
  int warmup = 30;
  int chunk = 30;  // timed steps per side before switching to the other
  std::size_t batch = 64;
  double lr = 1e-3;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:256,128";
  bool breakdown = true;
  int drift = 2100;  // steps of a fresh trainer whose first and last thirds are compared (0: off)
  std::string only;  // "", "rumor" or "ceiling": run one side only (for profilers)
};

// The matrix products of one training step of a dense net with layer widths w[0..L], nothing
// else. Weights and the output-layer gradient are random; activations flow forward from a real
// batch, gradients flow backward from G_L.
class GemmCeiling {
 public:
  GemmCeiling(const std::vector<std::size_t>& widths, const float* x, std::size_t batch)
      : L_(widths.size() - 1), x_(Eigen::Map<const RowMat>(x, batch, widths[0])) {
    rumor::Rng rng(7);
    auto rnd = [&](std::size_t r, std::size_t c, double sd) {
      RowMat m(r, c);
      for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(rng.normal() * sd);
      return m;
    };
    w_.resize(L_ + 1);
    gw_.resize(L_ + 1);
    a_.resize(L_ + 1);
    g_.resize(L_ + 1);
    for (std::size_t l = 1; l <= L_; ++l) {
      w_[l] = rnd(widths[l - 1], widths[l], std::sqrt(1.0 / static_cast<double>(widths[l - 1])));
      gw_[l].resize(widths[l - 1], widths[l]);
      a_[l].resize(batch, widths[l]);
      g_[l].resize(batch, widths[l]);
    }
    g_[L_] = rnd(batch, widths[L_], 0.01);
  }
  std::size_t products() const { return 2 * L_ + (L_ - 1); }
  // Floating-point operations of those products for one batch (2 per multiply-add).
  double flops() const {
    double f = 0;
    for (std::size_t l = 1; l <= L_; ++l) {
      const double b = static_cast<double>(x_.rows()), m = static_cast<double>(w_[l].rows()),
                   n = static_cast<double>(w_[l].cols());
      f += 2 * b * m * n * (l > 1 ? 3 : 2);  // forward, weight gradient, and (l > 1) input gradient
    }
    return f;
  }

  void forward() {
    for (std::size_t l = 1; l <= L_; ++l) {
      if (l == 1) a_[1].noalias() = x_ * w_[1];
      else a_[l].noalias() = a_[l - 1] * w_[l];
    }
  }
  void backward() {
    for (std::size_t l = L_; l >= 1; --l) {
      if (l == 1) gw_[1].noalias() = x_.transpose() * g_[1];
      else gw_[l].noalias() = a_[l - 1].transpose() * g_[l];
      if (l > 1) g_[l - 1].noalias() = g_[l] * w_[l].transpose();
    }
  }
  void step() {
    forward();
    backward();
  }
  // Keeps the compiler from dropping the work.
  double checksum() const {
    double s = 0;
    for (std::size_t l = 1; l <= L_; ++l) s += gw_[l](0, 0) + a_[l](0, 0);
    return s;
  }

 private:
  std::size_t L_;
  Eigen::Map<const RowMat> x_;
  std::vector<RowMat> w_, gw_, a_, g_;
};

std::vector<std::size_t> widths_of(const rumor::Model& m) {
  std::vector<std::size_t> w;
  const auto& layers = m.layers();
  for (std::size_t i = 0; i < layers.size(); i += 2) {
    if (w.empty()) w.push_back(layers[i].rows);
    w.push_back(layers[i].cols);
  }
  return w;
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Single-thread samples/s of rumor::Trainer::step() against the plain-Eigen GEMM ceiling, "
               "interleaved; see bench/README.md.",
               "bench_train_throughput"};
  app.add_option("--reps", args.reps, "interleaved repetitions")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--steps", args.steps, "timed steps per side per repetition")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--warmup", args.warmup, "untimed steps per side first in each repetition")
      ->check(rumor::bench::non_negative())
      ->capture_default_str();
  app.add_option("--chunk", args.chunk, "timed steps per side before switching to the other")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--batch", args.batch, "samples per step")->check(rumor::bench::positive())->capture_default_str();
  app.add_option("--lr", args.lr, "learning rate (Adam)")->check(rumor::bench::positive())->capture_default_str();
  app.add_option("--data", args.data, "data set directory, or 'synthetic'")->capture_default_str();
  app.add_option("--model", args.model, "model spec (rumor-peer --model)")->capture_default_str();
  app.add_flag_function(
      "--no-breakdown", [&](std::int64_t) { args.breakdown = false; }, "skip the timing of the parts of a step");
  app.add_option("--drift", args.drift,
                 "steps of a fresh trainer whose first and last thirds' CPU per step are compared (0: off); "
                 "subnormal floats once made the last third of 2,100 steps twice as slow")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--only", args.only, "run one side only (for profilers; no breakdown)")
      ->check(CLI::IsMember({"rumor", "ceiling"}));
  CLI11_PARSE(app, argc, argv);
  if (!args.only.empty()) args.breakdown = false;
  rumor::set_math_threads(1);
  Eigen::setNbThreads(1);

  const auto t_load = Clock::now();
  rumor::Task task = rumor::load_task(args.data);
  auto shard = std::make_shared<const rumor::Dataset>(std::move(task.train));
  const std::size_t outputs =
      shard->classes > 0 ? static_cast<std::size_t>(shard->classes) : shard->target_dim;
  fmt::print("# data {}: {} train rows x {} features, {} classes; loaded in {:.2f} s\n",
              shard->name, shard->rows, shard->dim, outputs, seconds(t_load, Clock::now()));

  rumor::TrainerConfig tc;
  tc.model = args.model;
  tc.optimizer.kind = "adam";
  tc.schedule.kind = "constant";
  tc.schedule.base_lr = args.lr;
  tc.batch = args.batch;
  tc.seed = 1;
  rumor::Trainer trainer(tc, shard, shard->dim, outputs);
  // The GEMM ceiling and the breakdown are written for dense models; a convolutional model
  // (bench/cnn_bench.sh) is timed on its own.
  const bool dense = trainer.model().fingerprint().rfind("cnn:", 0) != 0;
  const std::vector<std::size_t> widths = dense ? widths_of(trainer.model()) : std::vector<std::size_t>{1, 1};

  // The ceiling runs on a real batch (the first rows of the training set).
  std::vector<float> x0;
  std::vector<std::int32_t> y0;
  std::vector<float> t0;
  {
    std::vector<std::size_t> idx(std::min(args.batch, shard->rows));
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    rumor::gather_batch(*shard, idx, x0, y0, t0);
  }
  GemmCeiling ceiling(widths, x0.data(), std::min(args.batch, shard->rows));

  fmt::print("# model {} ({} parameters), {} lr {:g}, batch {}, threads {} (Eigen {}.{}.{})\n",
              trainer.model().fingerprint(), trainer.model().param_count(),
              trainer.optimizer().name(), args.lr, args.batch, rumor::math_threads(),
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  if (dense)
    fmt::print("# {} repetitions x {} timed steps (after {} warm-up steps each), interleaved in "
                "chunks of {} steps; ceiling = {} matrix products per step ({:.1f} MFLOP)\n",
                args.reps, args.steps, args.warmup, args.chunk, ceiling.products(), 1e-6 * ceiling.flops());
  else
    fmt::print("# {} repetitions x {} timed steps (after {} warm-up steps each); no GEMM ceiling for a "
                "convolutional model\n", args.reps, args.steps, args.warmup);
  std::fflush(stdout);

  const double samples_per_rep = static_cast<double>(args.steps) * static_cast<double>(args.batch);
  // Per repetition: samples/s by wall clock and by process CPU time, and the ratios.
  std::vector<double> rumor_sps, ceil_sps, ratios, rumor_cpu, ceil_cpu, ratios_cpu;
  double last_loss = 0, sink = 0;
  const bool run_rumor = args.only != "ceiling" || !dense, run_ceiling = args.only != "rumor" && dense;
  for (int r = 0; r < args.reps; ++r) {
    // Warm-up, then the timed steps in chunks that alternate between the two sides, so that a
    // disturbance from another process lasting a fraction of a second lands on both.
    if (run_rumor)
      for (int i = 0; i < args.warmup; ++i) last_loss = trainer.step();
    if (run_ceiling)
      for (int i = 0; i < args.warmup; ++i) ceiling.step();
    double rw = 0, rcpu = 0, cw = 0, ccpu = 0;
    for (int done = 0; done < args.steps; done += args.chunk) {
      const int n = std::min(args.chunk, args.steps - done);
      if (run_rumor) {
        const auto a = Clock::now();
        const double ca = cpu_now();
        for (int i = 0; i < n; ++i) last_loss = trainer.step();
        rcpu += cpu_now() - ca;
        rw += seconds(a, Clock::now());
      }
      if (run_ceiling) {
        const auto a = Clock::now();
        const double ca = cpu_now();
        for (int i = 0; i < n; ++i) ceiling.step();
        ccpu += cpu_now() - ca;
        cw += seconds(a, Clock::now());
      }
    }
    sink += ceiling.checksum();
    const double rs = run_rumor ? samples_per_rep / rw : 0, rc = run_rumor ? samples_per_rep / rcpu : 0;
    const double cs = run_ceiling ? samples_per_rep / cw : 0, cc = run_ceiling ? samples_per_rep / ccpu : 0;
    if (run_rumor) {
      rumor_sps.push_back(rs);
      rumor_cpu.push_back(rc);
    }
    if (run_ceiling) {
      ceil_sps.push_back(cs);
      ceil_cpu.push_back(cc);
    }
    if (run_rumor && run_ceiling) {
      ratios.push_back(rs / cs);
      ratios_cpu.push_back(rc / cc);
    }
    fmt::print("rep {}/{}:", r + 1, args.reps);
    if (run_rumor)
      fmt::print(" rumor {:8.1f} samples/s ({:.3f} ms/step, cpu {:8.1f}/s, loss {:.4f}) ", rs,
                  1e3 * args.batch / rs, rc, last_loss);
    if (run_ceiling)
      fmt::print(" ceiling {:8.1f} samples/s ({:.3f} ms/step, cpu {:8.1f}/s) ", cs, 1e3 * args.batch / cs, cc);
    if (run_rumor && run_ceiling) fmt::print(" ratio {:.3f} (cpu {:.3f})", rs / cs, rc / cc);
    fmt::print("\n");
    std::fflush(stdout);
  }
  if (!std::isfinite(last_loss)) {
    fmt::print(stderr, "training diverged (loss {:g})\n", last_loss);
    return 1;
  }

  // ---- Where the time goes ----
  if (args.breakdown && dense) {
    fmt::print("# breakdown: parts of Trainer::step timed separately (median over {} reps of {} "
                "steps, interleaved in chunks of {}; microseconds per step)\n", args.reps, args.steps,
                args.chunk);
    std::fflush(stdout);
    auto model = rumor::make_model(args.model, shard->dim, outputs);
    auto opt = rumor::make_optimizer(tc.optimizer, model->param_count());
    std::vector<float> params(model->param_count()), grad(model->param_count());
    rumor::Rng init(1);
    model->init(params, init);
    rumor::BatchOrder order(shard->rows, args.batch, 99);
    std::vector<float> bx, bt;
    std::vector<std::int32_t> by;
    // A batch-sized data set for the forward-only pass (Model::evaluate = forward + loss).
    const auto first = order.next();
    const std::vector<std::size_t> first_idx(first.begin(), first.end());
    const rumor::Dataset one = shard->subset(first_idx);

    std::vector<double> t_gather, t_lg, t_opt, t_fwd, t_lg_hot, t_cf, t_cb;
    std::vector<float> hx, ht;
    std::vector<std::int32_t> hy;
    rumor::gather_batch(*shard, first_idx, hx, hy, ht);
    // Four loops, interleaved in chunks like the main measurement; each chunk starts with one
    // untimed iteration so that every loop is timed with its own data in cache.
    // (1) the parts of Trainer::step, as it calls them;
    auto train_parts = [&](int n, bool timed, double& g, double& lg, double& o) {
      for (int i = 0; i < n; ++i) {
        const auto c0 = Clock::now();
        const auto idx = order.next();
        rumor::gather_batch(*shard, idx, bx, by, bt);
        const auto c1 = Clock::now();
        model->loss_and_grad(params, bx.data(), idx.size(), by.data(), nullptr, grad);
        const auto c2 = Clock::now();
        opt->step(params, grad, args.lr);
        const auto c3 = Clock::now();
        if (timed) {
          g += seconds(c0, c1);
          lg += seconds(c1, c2);
          o += seconds(c2, c3);
        }
      }
    };
    // (2) forward only (Model::evaluate on one batch: forward + loss + argmax);
    auto forward_only = [&](int n) {
      for (int i = 0; i < n; ++i) sink += model->evaluate(params, one).loss;
    };
    // (3) loss_and_grad alone, one batch over and over, nothing between: caches as warm as in
    //     the ceiling loop;
    auto lg_hot = [&](int n) {
      for (int i = 0; i < n; ++i)
        sink += model->loss_and_grad(params, hx.data(), first_idx.size(), hy.data(), nullptr, grad);
    };
    // (4) the ceiling, forward and backward products timed apart.
    auto ceiling_parts = [&](int n, bool timed, double& f, double& bw) {
      for (int i = 0; i < n; ++i) {
        const auto c0 = Clock::now();
        ceiling.forward();
        const auto c1 = Clock::now();
        ceiling.backward();
        const auto c2 = Clock::now();
        if (timed) {
          f += seconds(c0, c1);
          bw += seconds(c1, c2);
        }
      }
    };
    double unused0 = 0, unused1 = 0, unused2 = 0;
    for (int r = 0; r < args.reps; ++r) {
      train_parts(args.warmup, false, unused0, unused1, unused2);
      forward_only(args.warmup);
      lg_hot(args.warmup);
      ceiling_parts(args.warmup, false, unused0, unused1);
      double g = 0, lg = 0, o = 0, fw = 0, hot = 0, f = 0, bw = 0;
      for (int done = 0; done < args.steps; done += args.chunk) {
        const int n = std::min(args.chunk, args.steps - done);
        train_parts(1, false, unused0, unused1, unused2);
        train_parts(n, true, g, lg, o);
        forward_only(1);
        auto a = Clock::now();
        forward_only(n);
        fw += seconds(a, Clock::now());
        lg_hot(1);
        a = Clock::now();
        lg_hot(n);
        hot += seconds(a, Clock::now());
        ceiling_parts(1, false, unused0, unused1);
        ceiling_parts(n, true, f, bw);
      }
      sink += ceiling.checksum();
      t_gather.push_back(1e6 * g / args.steps);
      t_lg.push_back(1e6 * lg / args.steps);
      t_opt.push_back(1e6 * o / args.steps);
      t_fwd.push_back(1e6 * fw / args.steps);
      t_lg_hot.push_back(1e6 * hot / args.steps);
      t_cf.push_back(1e6 * f / args.steps);
      t_cb.push_back(1e6 * bw / args.steps);
    }
    const double g = median(t_gather), lg = median(t_lg), o = median(t_opt), fw = median(t_fwd);
    const double lgh = median(t_lg_hot);
    const double cf = median(t_cf), cb = median(t_cb);
    const double total = g + lg + o;
    auto line = [&](const char* key, const char* what, double us) {
      fmt::print("{:<26} {:9.1f}   {:5.1f}%  {}\n", key, us, 100.0 * us / total, what);
    };
    line("us_gather_batch", "BatchOrder::next + gather_batch", g);
    line("us_loss_and_grad", "Model::loss_and_grad (forward + backward)", lg);
    line("us_forward_only", "  of which ~forward (Model::evaluate on one batch)", fw);
    line("us_backward_approx", "  of which ~backward (difference)", lg - fw);
    line("us_optimizer", "Optimizer::step (Adam)", o);
    line("us_step_parts_total", "sum of the parts above", total);
    line("us_ceiling_forward", "ceiling: forward products", cf);
    line("us_ceiling_backward", "ceiling: backward products", cb);
    line("us_non_gemm_in_model", "loss_and_grad minus ceiling (bias, ReLU, softmax, bias grads, cache)",
         lg - cf - cb);
    line("us_loss_and_grad_hot", "loss_and_grad alone on one batch (no gather/optimizer between)", lgh);
    line("us_non_gemm_hot", "  minus ceiling: the model's own non-GEMM work", lgh - cf - cb);
  }

  // Does a step cost the same late in training as early? A fresh trainer (the same config),
  // CPU time per step over the first and the last third of --drift steps. Before the trainer
  // flushed subnormal floats to zero (core/fpmode.hpp) the MLP's last third of 2,100 steps
  // took about twice the first's (0.73 ms against 1.5-1.75 ms on the 2-core VM, 2026-12-07).
  double drift = 0;
  if (args.drift >= 3 && run_rumor) {
    rumor::Trainer fresh(tc, shard, shard->dim, outputs);
    const int third = args.drift / 3;
    double early = 0, late = 0;
    for (int i = 0; i < 3 * third; ++i) {
      const double c0 = cpu_now();
      sink += fresh.step();
      const double dc = cpu_now() - c0;
      if (i < third) early += dc;
      if (i >= 2 * third) late += dc;
    }
    drift = late / early;
    fmt::print("# drift: a fresh trainer's steps 0-{} at {:.3f} ms of CPU each, steps {}-{} at {:.3f} ms\n", third - 1,
               1e3 * early / third, 2 * third, 3 * third - 1, 1e3 * late / third);
  }

  const double rm = median(rumor_sps), cm = median(ceil_sps), ratio = median(ratios);
  fmt::print("# results (medians of {} interleaved repetitions)\n", args.reps);
  if (run_rumor) fmt::print("rumor_samples_per_s {:.1f}\n", rm);
  if (run_ceiling) fmt::print("ceiling_samples_per_s {:.1f}\n", cm);
  if (!ratios.empty()) {
    fmt::print("ratio_to_ceiling {:.3f}\n", ratio);
    fmt::print("ratio_min {:.3f}\n", *std::min_element(ratios.begin(), ratios.end()));
    fmt::print("ratio_max {:.3f}\n", *std::max_element(ratios.begin(), ratios.end()));
  }
  // The same by CPU time (steadier when other processes share the cores).
  if (run_rumor) fmt::print("rumor_cpu_samples_per_s {:.1f}\n", median(rumor_cpu));
  if (run_ceiling) fmt::print("ceiling_cpu_samples_per_s {:.1f}\n", median(ceil_cpu));
  if (!ratios_cpu.empty()) fmt::print("ratio_to_ceiling_cpu {:.3f}\n", median(ratios_cpu));
  // GEMM work per second (the same products on both sides).
  const double gflop_per_sample = ceiling.flops() / static_cast<double>(args.batch) * 1e-9;
  if (run_rumor && dense) fmt::print("rumor_gemm_gflops {:.1f}\n", rm * gflop_per_sample);
  if (run_ceiling) fmt::print("ceiling_gemm_gflops {:.1f}\n", cm * gflop_per_sample);
  if (drift > 0) fmt::print("late_over_early_step {:.3f}\n", drift);
  fmt::print("param_count {}\n", trainer.model().param_count());
  fmt::print("bench_max_rss_kib {}\n", max_rss_kib());
  if (!ratios.empty())
    fmt::print("target_ratio_to_ceiling 0.80 {}\n", ratio >= 0.80 ? "met" : "NOT_MET");
  if (sink == 12345.678) fmt::print("# {:g}\n", sink);  // never true; keeps the work alive
  return 0;
}
