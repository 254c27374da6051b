// Dumps model gradients (mlp:256,128, logreg, linreg at batch 1, 7, 64, 1024), optimizer steps
// (sgd, sgd+momentum, adam, adamw), 40-step Trainer runs (adam and sgd, batch 64 and 256) and
// a 1000-step run on Fashion-MNIST (where installed) as
// raw bytes, through the public API that existed before and after core/backend.hpp, so that
// bench/cpu_identity.sh can link it against two builds of rumor_core and compare the bytes.
// Not a CMake target: the script compiles it against each build.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <xmmintrin.h>
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/trainer.hpp"
#include "data/files.hpp"
#include "data/synthetic.hpp"
using namespace rumor;
static void put(FILE* f, const std::vector<float>& v) { fwrite(v.data(), 4, v.size(), f); }
static void put(FILE* f, std::span<const float> v) { fwrite(v.data(), 4, v.size(), f); }
int main(int argc, char** argv) {
  std::string out;
  CLI::App app{"Writes model gradients, optimizer steps and Trainer runs as raw bytes to OUT, for bench/cpu_identity.sh "
               "to compare two builds of rumor_core.",
               "cpu_identity"};
  app.add_option("OUT", out, "the file to write (truncated)")->required();
  CLI11_PARSE(app, argc, argv);
  // Subnormals flushed to zero for the whole run, on both sides: since 2026-12-07 the Trainer
  // sets FTZ and DAZ itself while it computes (core/fpmode.hpp), and a base without that must
  // run in the same mode for "the same math" to mean the same bytes.
  _mm_setcsr(_mm_getcsr() | 0x8040);
  FILE* f = fopen(out.c_str(), "wb");
  if (!f) {
    std::perror(out.c_str());
    return 1;
  }
  for (const char* spec : {"mlp:256,128", "logreg", "linreg"}) {
    auto m = make_model(spec, 784, 10);
    Rng rng(3);
    // The gradient at a fixed alignment: Eigen's bias sums depend on the address (mod 32).
    std::vector<float> p(m->param_count()), gs(p.size() + 16);
    float* gp = gs.data(); while (reinterpret_cast<std::uintptr_t>(gp) % 64) ++gp;
    std::span<float> g(gp, p.size());
    m->init(p, rng);
    for (auto& v : p) v += (float)rng.normal(0, 0.01);
    for (std::size_t rows : {1, 7, 64, 1024}) {
      std::vector<float> x(rows * 784), t(rows * 10);
      std::vector<std::int32_t> y(rows);
      for (auto& v : x) v = (float)rng.uniform(0, 1);
      for (auto& v : t) v = (float)rng.normal();
      for (auto& v : y) v = (int)rng.below(10);
      double l = m->loss_and_grad(p, x.data(), rows, y.data(), t.data(), g);
      fwrite(&l, 8, 1, f);
      put(f, g);
    }
  }
  for (const char* kind : {"sgd", "adam", "adamw"}) for (double mu : {0.0, 0.9}) {
    OptimizerConfig c; c.kind = kind; c.momentum = mu; c.weight_decay = 0.01;
    const std::size_t n = 100003;
    auto o = make_optimizer(c, n);
    Rng rng(8);
    std::vector<float> p(n), g(n);
    for (auto& v : p) v = (float)rng.normal();
    for (int s = 0; s < 3; ++s) { for (auto& v : g) v = (float)rng.normal(); o->step(p, g, 0.01); }
    put(f, p); put(f, o->state());
  }
  const Task task = gaussian_mixture_task(3000, 500, 784, 10, 3.0, 5);
  auto shard = std::make_shared<Dataset>(task.train);
  for (const char* opt : {"adam", "sgd"}) for (std::size_t b : {64, 256}) {
    TrainerConfig cfg; cfg.model = "mlp:256,128"; cfg.optimizer.kind = opt; cfg.batch = b; cfg.schedule.base_lr = 0.01;
    Trainer t(cfg, shard, 784, 10);
    for (int s = 0; s < 40; ++s) { double l = t.step(); fwrite(&l, 8, 1, f); }
    put(f, t.params()); put(f, t.optimizer().state());
    auto e = t.evaluate(task.test); fwrite(&e.loss, 8, 1, f); fwrite(&e.accuracy, 8, 1, f);
  }
  // 1000 steps on Fashion-MNIST as bench_train_throughput and rumor-peer run them (where the
  // data is installed): the Trainer's own buffers, wherever the heap puts them.
  FILE* probe = fopen("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "rb");
  if (probe) {
    fclose(probe);
    Task fm = load_task("/usr/share/datasets/fashion-mnist");
    auto fs = std::make_shared<const Dataset>(std::move(fm.train));
    TrainerConfig tc;
    tc.model = "mlp:256,128";
    tc.schedule.base_lr = 1e-3;
    Trainer t(tc, fs, fs->dim, 10);
    for (int s = 0; s < 1000; ++s) {
      double l = t.step();
      fwrite(&l, 8, 1, f);
    }
    put(f, t.params());
  }
  fclose(f);
}
