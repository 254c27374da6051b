// GPU training throughput: samples/s of rumor::Trainer::step() on the CUDA backend against the
// CPU (Eigen) backend and against the cuBLAS-bound ceiling of the same shapes, at several
// batch sizes (default 64 and 1024), for the MLP on Fashion-MNIST shapes (784-256-128-10).
//
// gpu:     Trainer::step() with --device cuda semantics: shard resident on the device, an index
//          upload and a gather per batch, forward, backward, the optimizer kernel, the loss and
//          the parameters back to the pinned host mirror (what the gossip protocol reads), as
//          the daemon runs it.
// cpu:     the same Trainer::step() on the CPU backend, with --cpu-threads Eigen threads.
// ceiling: only the 8 sgemm calls of one step (forward X·W1, A1·W2, A2·W3; backward A2ᵀ·G3,
//          G3·W3ᵀ, A1ᵀ·G2, G2·W2ᵀ, Xᵀ·G1) through the same Backend::gemm (cuBLAS), queued back
//          to back and synchronised once per step: what the step would cost if everything
//          but the products were free.
// Also the time of one parameter round trip (pinned host -> device -> pinned host), the part
// of a step that exists only so the protocol can see the parameters.
//
// Results are medians over --reps repetitions; lines starting with a key and a number, e.g.
//   gpu_samples_per_s b=64 123456
// bench/gpu_check.sh runs this on a GPU machine; bench/HISTORY.md ("GPU peers") records the output.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "bench/flags.hpp"
#include "data/dataset.hpp"
#include "core/model.hpp"
#include "core/trainer.hpp"
#include "data/files.hpp"
#include "gpu/cuda_backend.hpp"

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Args {
  std::vector<std::size_t> batches{64, 1024};
  int reps = 5, steps = 200, cpu_steps = 30, warmup = 20, cpu_threads = 1, device = 0;
  std::string data = "/usr/share/datasets/fashion-mnist", model = "mlp:256,128";
};

// Samples/s of `steps` Trainer steps, median over reps.
double trainer_rate(rumor::Trainer& t, int warmup, int steps, int reps, std::size_t batch) {
  for (int i = 0; i < warmup; ++i) t.step();
  std::vector<double> r;
  for (int k = 0; k < reps; ++k) {
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) t.step();
    r.push_back(static_cast<double>(steps) * static_cast<double>(batch) / since(t0));
  }
  return median(r);
}
}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"GPU training throughput: Trainer::step() on the CUDA backend against the CPU backend and the cuBLAS-bound "
               "ceiling, at several batch sizes; bench/gpu_check.sh runs it.",
               "bench_gpu"};
  app.add_option("--batches", args.batches, "batch sizes, comma-separated")
      ->delimiter(',')
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--reps", args.reps, "repetitions (medians are printed)")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--steps", args.steps, "timed GPU steps per repetition")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--cpu-steps", args.cpu_steps, "timed CPU steps per repetition")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--warmup", args.warmup, "untimed steps first")
      ->check(rumor::bench::non_negative())
      ->capture_default_str();
  app.add_option("--cpu-threads", args.cpu_threads, "Eigen threads of the CPU backend")
      ->check(rumor::bench::positive())
      ->capture_default_str();
  app.add_option("--device", args.device, "CUDA device index")
      ->check(rumor::bench::non_negative())
      ->capture_default_str();
  app.add_option("--data", args.data, "data set directory, or 'synthetic'")->capture_default_str();
  app.add_option("--model", args.model, "model spec (rumor-peer --model)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string why;
  if (rumor::gpu::device_count(&why) <= 0) {
    fmt::print("SKIPPED: no CUDA device ({})\n", why);
    return 0;
  }
  std::shared_ptr<rumor::Backend> gpu;
  try {
    gpu = rumor::gpu::make_cuda_backend(args.device);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  rumor::set_math_threads(args.cpu_threads);
  const auto t_load = Clock::now();
  rumor::Task task = rumor::load_task(args.data);
  auto shard = std::make_shared<const rumor::Dataset>(std::move(task.train));
  const std::size_t outputs = shard->classes > 0 ? static_cast<std::size_t>(shard->classes) : shard->target_dim;
  fmt::print("# data {}: {} rows x {} features, {} outputs; loaded in {:.2f} s\n", shard->name, shard->rows,
              shard->dim, outputs, since(t_load));
  fmt::print("gpu_device {}\n", gpu->name());
  fmt::print("cpu_threads {}\n", rumor::math_threads());

  for (const std::size_t batch : args.batches) {
    rumor::TrainerConfig tc;
    tc.model = args.model;
    tc.batch = batch;
    tc.seed = 1;
    tc.schedule.base_lr = 1e-3;
    rumor::Trainer cpu(tc, shard, shard->dim, outputs);
    tc.backend = gpu;
    rumor::Trainer dev(tc, shard, shard->dim, outputs);
    const double gpu_rate = trainer_rate(dev, args.warmup, args.steps, args.reps, batch);
    const double cpu_rate = trainer_rate(cpu, std::min(args.warmup, 3), args.cpu_steps, args.reps, batch);

    // The ceiling: the step's 8 products alone, on activations of the right shapes.
    std::vector<std::size_t> w{shard->dim};
    for (const auto& l : cpu.model().layers())
      if (l.name.find(".weight") != std::string::npos) w.push_back(l.cols);
    const std::size_t L = w.size() - 1;
    rumor::Buffer<float> params(*gpu, cpu.model().param_count()), grad(*gpu, cpu.model().param_count());
    params.upload(cpu.params());
    std::vector<rumor::Buffer<float>> act(L + 1), del(L + 1);
    std::vector<float> fill;
    for (std::size_t l = 0; l <= L; ++l) {
      act[l] = rumor::Buffer<float>(*gpu, batch * w[l]);
      del[l] = rumor::Buffer<float>(*gpu, batch * w[l]);
      fill.assign(batch * w[l], 0.01f);
      act[l].upload(fill);
      del[l].upload(fill);
    }
    std::vector<std::size_t> woff(L + 1);
    for (std::size_t l = 1, off = 0; l <= L; ++l) {
      woff[l] = off;
      off += w[l - 1] * w[l] + w[l];
    }
    auto products = [&] {
      for (std::size_t l = 1; l <= L; ++l)
        gpu->gemm(false, false, batch, w[l], w[l - 1], act[l - 1].data(), params.data() + woff[l], act[l].data());
      for (std::size_t l = L; l >= 1; --l) {
        gpu->gemm(true, false, w[l - 1], w[l], batch, act[l - 1].data(), del[l].data(), grad.data() + woff[l]);
        if (l > 1)
          gpu->gemm(false, true, batch, w[l - 1], w[l], del[l].data(), params.data() + woff[l], del[l - 1].data());
      }
      gpu->synchronize();
    };
    for (int i = 0; i < args.warmup; ++i) products();
    std::vector<double> r;
    for (int k = 0; k < args.reps; ++k) {
      const auto t0 = Clock::now();
      for (int i = 0; i < args.steps; ++i) products();
      r.push_back(static_cast<double>(args.steps) * static_cast<double>(batch) / since(t0));
    }
    const double ceiling = median(r);

    // One parameter round trip through pinned host memory.
    const std::size_t n = cpu.model().param_count();
    auto* pinned = static_cast<float*>(gpu->allocate_host(n * sizeof(float)));
    std::copy(cpu.params().begin(), cpu.params().end(), pinned);
    std::vector<double> rt;
    for (int k = 0; k < std::max(args.reps, 20); ++k) {
      const auto t0 = Clock::now();
      gpu->upload(params.data(), pinned, n * sizeof(float));
      gpu->download(pinned, params.data(), n * sizeof(float));
      rt.push_back(since(t0));
    }
    gpu->deallocate_host(pinned);

    fmt::print("# batch {}: gpu {:.0f} samples/s, cpu {:.0f} samples/s ({} thread(s)), cuBLAS ceiling {:.0f} samples/s\n",
                batch, gpu_rate, cpu_rate, rumor::math_threads(), ceiling);
    fmt::print("gpu_samples_per_s b={} {:.1f}\n", batch, gpu_rate);
    fmt::print("cpu_samples_per_s b={} {:.1f}\n", batch, cpu_rate);
    fmt::print("cublas_ceiling_samples_per_s b={} {:.1f}\n", batch, ceiling);
    fmt::print("gpu_over_cpu b={} {:.2f}\n", batch, gpu_rate / cpu_rate);
    fmt::print("gpu_over_ceiling b={} {:.3f}\n", batch, gpu_rate / ceiling);
    fmt::print("gpu_step_us b={} {:.1f}\n", batch, 1e6 * static_cast<double>(batch) / gpu_rate);
    fmt::print("param_roundtrip_us b={} {:.1f}\n", batch, 1e6 * median(rt));
    std::fflush(stdout);
  }
  return 0;
}
