// Models: gradients against central finite differences (in double-checked float), layout,
// fingerprints, initialisation, and an end-to-end synthetic training run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/fpmode.hpp"
#include "core/model.hpp"
#include "core/trainer.hpp"
#include "data/synthetic.hpp"

using namespace rumor;

namespace {

// Checks every parameter's analytic gradient against (L(p+h) - L(p-h)) / 2h.
void check_gradients(const std::string& spec, std::size_t in, std::size_t out, bool regression) {
  auto m = make_model(spec, in, out);
  Rng rng(7);
  std::vector<float> p(m->param_count()), g(m->param_count()), g2(m->param_count());
  m->init(p, rng);
  // Non-zero biases so their gradients are exercised off the symmetric point.
  for (auto& v : p) v += static_cast<float>(rng.normal(0, 0.05));
  const std::size_t B = 5;
  std::vector<float> x(B * in), t(B * out);
  std::vector<std::int32_t> y(B);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : t) v = static_cast<float>(rng.normal());
  for (auto& v : y) v = static_cast<std::int32_t>(rng.below(out));
  const std::int32_t* yl = regression ? nullptr : y.data();
  const float* tl = regression ? t.data() : nullptr;
  m->loss_and_grad(p, x.data(), B, yl, tl, g);
  const float h = 1e-3f;  // small enough not to cross ReLU kinks
  double max_err = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const float keep = p[i];
    p[i] = keep + h;
    const double lp = m->loss_and_grad(p, x.data(), B, yl, tl, g2);
    p[i] = keep - h;
    const double lm = m->loss_and_grad(p, x.data(), B, yl, tl, g2);
    p[i] = keep;
    const double fd = (lp - lm) / (2.0 * h);
    const double err = std::abs(fd - g[i]) / std::max(1e-2, std::abs(fd) + std::abs(g[i]));
    max_err = std::max(max_err, err);
  }
  INFO(spec << " max relative gradient error " << max_err);
  CHECK(max_err < 2e-2);
}

}  // namespace

TEST_CASE("model: the math is single-threaded unless set_math_threads asks for more (seeded runs repeat)") {
  // Nothing in this binary has called set_math_threads before this test runs in its own
  // process (ctest runs one test case per process); OpenMP's default here would be one thread
  // per core.
  CHECK(math_threads() == 1);
}

TEST_CASE("model: MLP gradients match finite differences for every layer") {
  check_gradients("mlp:7,5", 6, 4, false);
  check_gradients("mlp:9,6,5", 4, 3, false);
}

TEST_CASE("model: logistic and linear regression gradients match finite differences") {
  check_gradients("logreg", 8, 5, false);
  check_gradients("linreg", 6, 3, true);
}

TEST_CASE("model: layers are contiguous views of one flat buffer") {
  auto m = make_model("mlp:256,128", 784, 10);
  CHECK(m->param_count() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  std::size_t off = 0;
  for (const auto& l : m->layers()) {
    CHECK(l.offset == off);
    off += l.size();
  }
  CHECK(off == m->param_count());
  CHECK(m->fingerprint() == "mlp:784-256-128-10/ce/p235146/f32");
  CHECK(make_model("logreg", 784, 10)->fingerprint() != make_model("linreg", 784, 10)->fingerprint());
}

TEST_CASE("model: bad specs are refused with the accepted forms") {
  CHECK_THROWS_WITH_AS(make_model("mlp:", 4, 2), doctest::Contains("mlp:256,128"), std::invalid_argument);
  CHECK_THROWS_AS(make_model("mlp:12,x", 4, 2), std::invalid_argument);
  CHECK_THROWS_AS(make_model("mlp:0", 4, 2), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_model("cnn", 4, 2), doctest::Contains("logreg"), std::invalid_argument);
}

TEST_CASE("model: the torch initialisation is PyTorch's nn.Linear / nn.Conv2d default, He stays the default") {
  // Every weight and bias uniform in +-1/sqrt(fan-in): a dense layer's input width, a
  // convolution's K*K*Cin (tests/python/test_torch.py compares it with torch's own).
  for (const char* spec : {"mlp:512,64", "cnn:c8k3p1,p2,f32"}) {
    CAPTURE(spec);
    auto m = make_model(spec, 784, 10);
    std::vector<float> t(m->param_count()), he(m->param_count()), he2(m->param_count());
    Rng r1(4), r2(4), r3(4);
    m->init(t, r1, InitScheme::Torch);
    m->init(he, r2);
    m->init(he2, r3, InitScheme::He);
    CHECK(he == he2);  // the two-argument init is He's, draw for draw
    CHECK(t != he);
    const auto& layers = m->layers();
    for (std::size_t l = 0; l + 1 < layers.size(); l += 2) {
      const LayerView& w = layers[l];
      const LayerView& b = layers[l + 1];
      const double bound = 1.0 / std::sqrt(static_cast<double>(w.rows));
      CAPTURE(w.name);
      double mx = 0, s2 = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        mx = std::max(mx, double(std::abs(t[w.offset + i])));
        s2 += double(t[w.offset + i]) * t[w.offset + i];
      }
      CHECK(mx <= bound);
      CHECK(mx > 0.9 * bound);
      if (w.size() >= 5000) CHECK(s2 / w.size() == doctest::Approx(bound * bound / 3).epsilon(0.05));
      double bmx = 0;
      std::size_t zeros = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        bmx = std::max(bmx, double(std::abs(t[b.offset + i])));
        zeros += t[b.offset + i] == 0.0f;
        CHECK(he[b.offset + i] == 0.0f);  // He's biases start at zero
      }
      CHECK(bmx <= bound);
      CHECK(zeros == 0);
    }
  }
  CHECK(parse_init_scheme("he") == InitScheme::He);
  CHECK(parse_init_scheme("torch") == InitScheme::Torch);
  CHECK(std::string(init_scheme_name(InitScheme::Torch)) == "torch");
  CHECK_THROWS_WITH_AS(parse_init_scheme("xavier"), doctest::Contains("expected he"), std::invalid_argument);
}

TEST_CASE("model: seeded initialisation is deterministic and scaled (He / Xavier)") {
  auto m = make_model("mlp:512", 1000, 10);
  std::vector<float> a(m->param_count()), b(m->param_count());
  Rng r1(3), r2(3);
  m->init(a, r1);
  m->init(b, r2);
  CHECK(a == b);
  // First layer He-normal: variance ~ 2/fan_in.
  const auto& w1 = m->layers()[0];
  double s2 = 0;
  for (std::size_t i = 0; i < w1.size(); ++i) s2 += double(a[w1.offset + i]) * a[w1.offset + i];
  CHECK(s2 / w1.size() == doctest::Approx(2.0 / 1000).epsilon(0.05));
  // Output layer Xavier-uniform: bound sqrt(6/(in+out)).
  const auto& w2 = m->layers()[2];
  const double bound = std::sqrt(6.0 / (512 + 10));
  double mx = 0;
  for (std::size_t i = 0; i < w2.size(); ++i) mx = std::max(mx, double(std::abs(a[w2.offset + i])));
  CHECK(mx <= bound);
  CHECK(mx > 0.9 * bound);
  for (std::size_t i = 0; i < m->layers()[1].size(); ++i) CHECK(a[m->layers()[1].offset + i] == 0.0f);
}

TEST_CASE("model: training on a synthetic Gaussian mixture reaches 0.9 test accuracy") {
  const Task task = gaussian_mixture_task(4000, 1000, 20, 5, 4.0, 11);
  TrainerConfig cfg;
  cfg.model = "mlp:32";
  cfg.batch = 32;
  cfg.seed = 5;
  Trainer tr(cfg, std::make_shared<Dataset>(task.train), 20, 5);
  const double acc0 = tr.evaluate(task.test).accuracy;
  for (int i = 0; i < 3 * 4000 / 32; ++i) tr.step();
  const EvalResult r = tr.evaluate(task.test);
  INFO("accuracy before " << acc0 << " after " << r.accuracy);
  CHECK(r.accuracy >= 0.9);
  CHECK(r.accuracy > acc0 + 0.3);
}

TEST_CASE("model: the trainer flushes subnormal floats to zero while it computes, and gives the thread its mode back") {
  // A subnormal costs x86 a microcode assist per operation: left on, the quickstart MLP's step
  // doubled between its first 700 steps and its 2,000th (core/fpmode.hpp).
  volatile float tiny = 1e-39f;  // below FLT_MIN (1.18e-38): subnormal
  const auto times_one = [&] { return tiny * 1.0f; };
  REQUIRE(!FlushDenormals::active());  // the thread's default: IEEE subnormals
  CHECK(times_one() != 0.0f);
  {
    const FlushDenormals ftz;
    CHECK(FlushDenormals::active());
    CHECK(times_one() == 0.0f);  // DAZ: a subnormal input reads as zero
    {
      const FlushDenormals nested;
      CHECK(FlushDenormals::active());
    }
    CHECK(FlushDenormals::active());  // the inner scope restored the outer one's mode
  }
  CHECK(!FlushDenormals::active());
  CHECK(times_one() != 0.0f);
  const Task task = gaussian_mixture_task(400, 100, 20, 5, 4.0, 11);
  TrainerConfig cfg;
  cfg.model = "mlp:32";
  cfg.batch = 32;
  Trainer tr(cfg, std::make_shared<Dataset>(task.train), 20, 5);
  for (int i = 0; i < 5; ++i) tr.step();
  (void)tr.evaluate(task.test);
  CHECK(!FlushDenormals::active());  // a Python script's thread keeps its own mode
  // In the trainer, a gradient that underflows is zero, not subnormal: linear regression on
  // inputs of 1e-20 and targets of 0, whose gradient is about w * 1e-40.
  Dataset d;
  d.rows = 64;
  d.dim = 4;
  d.target_dim = 1;
  d.x.assign(d.rows * d.dim, 1e-20f);
  d.targets.assign(d.rows, 0.0f);
  TrainerConfig lin;
  lin.model = "linreg";
  lin.batch = 8;
  Trainer small(lin, std::make_shared<Dataset>(d), d.dim, 1);
  (void)small.compute_gradient();
  int subnormal = 0, zero = 0;
  for (float g : small.gradient()) {
    subnormal += std::fpclassify(g) == FP_SUBNORMAL;
    zero += g == 0.0f;
  }
  INFO("gradient entries: " << small.gradient().size() << ", zero " << zero << ", subnormal " << subnormal);
  CHECK(subnormal == 0);
  CHECK(zero >= 4);  // the weights' (the bias's sees no input)
}

TEST_CASE("model: linear regression on a synthetic task approaches the noise floor") {
  const Task task = linear_regression_task(4000, 1000, 10, 2, 0.1, 4);
  TrainerConfig cfg;
  cfg.model = "linreg";
  cfg.optimizer.kind = "sgd";
  cfg.schedule.base_lr = 0.05;
  cfg.batch = 32;
  Trainer tr(cfg, std::make_shared<Dataset>(task.train), 10, 2);
  for (int i = 0; i < 2000; ++i) tr.step();
  // Noise floor of 0.5 * sum of squares per row: 0.5 * 2 * 0.01 = 0.01.
  CHECK(tr.evaluate(task.test).loss < 0.02);
}
