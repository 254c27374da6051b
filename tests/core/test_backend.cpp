// The backend interface on the CPU (core/backend.hpp):
// - the Eigen backend through the interface gives bit for bit what the models and optimizers
//   computed before the interface existed (a copy of that code is kept below as the reference);
// - a Trainer on a "device" backend, emulated on the CPU (separate memory, copies on upload and
//   download), takes the CPU Trainer's steps, and the mirror rule holds: a write announced with
//   params_written() reaches the device, an unannounced one does not. This is the device path
//   of Trainer, tested on every machine; tests/gpu runs it on a real GPU. (Equal to rounding,
//   not bit for bit: Eigen sums a bias gradient in an order that depends on the address of the
//   gradient buffer modulo the packet size, and the two Trainers' buffers sit differently.)
// Bit-identity with the code before the interface was also checked across builds: a program
// dumping gradients, optimizer steps and 40-step Trainer runs gave the same bytes linked
// against rumor_core of commit 169d4b6 and of this one (see the closing note of issue 8).
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/backend.hpp"
#include "core/mix.hpp"
#include "core/model.hpp"
#include "core/optimizer.hpp"
#include "core/trainer.hpp"
#include "data/synthetic.hpp"

using namespace rumor;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using MapConstMat = Eigen::Map<const RowMat>;
using MapConstVec = Eigen::Map<const Eigen::RowVectorXf>;
using MapVec = Eigen::Map<Eigen::RowVectorXf>;

// The dense network's loss_and_grad as it was written before core/backend.hpp (commit 169d4b6,
// core/model.cpp), for widths w and softmax cross-entropy or squared error.
double reference_loss_and_grad(const std::vector<std::size_t>& widths, bool ce, const float* params, const float* x,
                               std::size_t rows, const std::int32_t* labels, const float* targets, float* grad) {
  const std::size_t L = widths.size() - 1;
  std::vector<std::size_t> woff(L + 1), boff(L + 1);
  std::size_t off = 0;
  for (std::size_t l = 1; l <= L; ++l) {
    woff[l] = off;
    off += widths[l - 1] * widths[l];
    boff[l] = off;
    off += widths[l];
  }
  std::vector<RowMat> acts(L + 1), deltas(L + 1);
  for (std::size_t l = 1; l <= L; ++l) {
    MapConstMat wm(params + woff[l], widths[l - 1], widths[l]);
    MapConstVec bv(params + boff[l], widths[l]);
    RowMat& a = acts[l];
    a.resize(rows, widths[l]);
    if (l == 1)
      a.noalias() = MapConstMat(x, rows, widths[0]) * wm;
    else
      a.noalias() = acts[l - 1] * wm;
    float* pa = a.data();
    const float* pb = bv.data();
    const std::size_t C = widths[l];
    for (std::size_t i = 0; i < rows; ++i) {
      float* row = pa + i * C;
      if (l < L)
        for (std::size_t c = 0; c < C; ++c) row[c] = std::max(row[c] + pb[c], 0.0f);
      else
        for (std::size_t c = 0; c < C; ++c) row[c] += pb[c];
    }
  }
  const std::size_t C = widths[L];
  RowMat delta(rows, C);
  const float inv_b = 1.0f / static_cast<float>(rows);
  double loss = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* z = acts[L].data() + i * C;
    float* g = delta.data() + i * C;
    if (ce) {
      const std::int32_t y = labels[i];
      const float m = *std::max_element(z, z + C);
      float se = 0;
      for (std::size_t c = 0; c < C; ++c) {
        g[c] = std::exp(z[c] - m);
        se += g[c];
      }
      const float inv = 1.0f / se;
      for (std::size_t c = 0; c < C; ++c) g[c] *= inv * inv_b;
      g[y] -= inv_b;
      loss += std::log(static_cast<double>(se)) - static_cast<double>(z[y] - m);
    } else {
      const float* t = targets + i * C;
      for (std::size_t c = 0; c < C; ++c) {
        const float e = z[c] - t[c];
        g[c] = e * inv_b;
        loss += 0.5 * static_cast<double>(e) * e;
      }
    }
  }
  for (std::size_t l = L; l >= 1; --l) {
    RowMat& d = (l == L) ? delta : deltas[l];
    MapMat gw(grad + woff[l], widths[l - 1], widths[l]);
    MapVec gb(grad + boff[l], widths[l]);
    if (l == 1)
      gw.noalias() = MapConstMat(x, rows, widths[0]).transpose() * d;
    else
      gw.noalias() = acts[l - 1].transpose() * d;
    gb.noalias() = d.colwise().sum();
    if (l > 1) {
      MapConstMat wm(params + woff[l], widths[l - 1], widths[l]);
      RowMat& dp = deltas[l - 1];
      dp.resize(rows, widths[l - 1]);
      dp.noalias() = d * wm.transpose();
      const float* a = acts[l - 1].data();
      float* pd = dp.data();
      for (std::size_t i = 0, n = dp.size(); i < n; ++i) pd[i] = a[i] > 0.0f ? pd[i] : 0.0f;
    }
  }
  return loss / static_cast<double>(rows);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// A pointer into `storage` (16 floats longer than needed) at the same address mod 64 as `like`.
float* same_alignment_as(const float* like, std::vector<float>& storage) {
  const auto want = reinterpret_cast<std::uintptr_t>(like) % 64;
  for (std::size_t i = 0; i < 16; ++i)
    if (reinterpret_cast<std::uintptr_t>(storage.data() + i) % 64 == want) return storage.data() + i;
  FAIL("no float offset reproduces the alignment");
  return nullptr;
}

// max |a - b| / max |b|
double rel_max_diff(std::span<const float> a, std::span<const float> b) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / std::max(m, 1e-30);
}

}  // namespace

TEST_CASE("backend: the Eigen backend through the interface gives the pre-interface numbers bit for bit") {
  struct Case {
    const char* spec;
    std::vector<std::size_t> widths;
    bool ce;
  };
  for (const Case& k : {Case{"mlp:33,17", {50, 33, 17, 10}, true}, Case{"logreg", {50, 10}, true},
                        Case{"linreg", {50, 10}, false}}) {
    auto m = make_model(k.spec, 50, 10);
    Rng rng(11);
    std::vector<float> p(m->param_count());
    m->init(p, rng);
    for (auto& v : p) v += static_cast<float>(rng.normal(0, 0.01));
    for (std::size_t rows : {1, 7, 64}) {
      std::vector<float> x(rows * 50), t(rows * 10), g(p.size());
      // Eigen sums a bias gradient in an order that depends on where it lands (address mod
      // the packet size): the reference writes at the same alignment as the model.
      std::vector<float> gref_storage(p.size() + 16);
      float* gref = same_alignment_as(g.data(), gref_storage);
      std::vector<std::int32_t> y(rows);
      for (auto& v : x) v = static_cast<float>(rng.uniform(0, 1));
      for (auto& v : t) v = static_cast<float>(rng.normal());
      for (auto& v : y) v = static_cast<std::int32_t>(rng.below(10));
      const double loss = m->loss_and_grad(p, x.data(), rows, k.ce ? y.data() : nullptr, k.ce ? nullptr : t.data(), g);
      const double lref = reference_loss_and_grad(k.widths, k.ce, p.data(), x.data(), rows, y.data(), t.data(), gref);
      INFO(std::string(k.spec) << " rows " << rows);
      CHECK(loss == lref);
      CHECK(same_bits(g, std::span<const float>(gref, g.size())));
    }
  }
}

TEST_CASE("backend: optimizer updates through the CPU backend equal the pre-interface loops bit for bit") {
  const std::size_t n = 1001;
  Rng rng(5);
  std::vector<float> p0(n), g(n);
  for (auto& v : p0) v = static_cast<float>(rng.normal());
  for (auto& v : g) v = static_cast<float>(rng.normal());
  for (const char* kind : {"sgd", "sgd-m", "nesterov", "adam", "adamw"}) {
    OptimizerConfig c;
    c.kind = std::string(kind).rfind("adam", 0) == 0 ? kind : "sgd";
    c.momentum = std::string(kind) == "sgd" ? 0.0 : 0.9;
    c.nesterov = std::string(kind) == "nesterov";
    c.weight_decay = 0.01;
    auto o = make_optimizer(c, n);
    std::vector<float> p = p0, q = p0, m(n, 0.0f), v(n, 0.0f);
    const double lr = 0.05;
    for (int s = 1; s <= 3; ++s) {
      o->step(p, g, lr);
      // The old loops (core/optimizer.cpp before the backend interface).
      const float wd = static_cast<float>(c.weight_decay), mu = static_cast<float>(c.momentum),
                  a = static_cast<float>(lr);
      if (c.kind == "sgd" && c.momentum == 0.0) {
        for (std::size_t i = 0; i < n; ++i) q[i] -= a * (g[i] + wd * q[i]);
      } else if (c.kind == "sgd") {
        for (std::size_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * q[i];
          m[i] = mu * m[i] + gi;
          q[i] -= c.nesterov ? a * (gi + mu * m[i]) : a * m[i];
        }
      } else {
        const bool dec = c.kind == "adamw";
        const double bc1 = 1.0 - std::pow(c.beta1, s), bc2 = 1.0 - std::pow(c.beta2, s);
        const float step = static_cast<float>(lr / bc1), isb = static_cast<float>(1.0 / std::sqrt(bc2));
        const float b1 = static_cast<float>(c.beta1), b2 = static_cast<float>(c.beta2), eps = static_cast<float>(c.eps);
        const float decay = dec ? static_cast<float>(1.0 - lr * c.weight_decay) : 1.0f;
        for (std::size_t i = 0; i < n; ++i) {
          const float gi = dec ? g[i] : g[i] + wd * q[i];
          m[i] = b1 * m[i] + (1.0f - b1) * gi;
          v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
          q[i] = q[i] * decay - step * m[i] / (std::sqrt(v[i]) * isb + eps);
        }
      }
    }
    INFO(std::string(kind));
    if (c.kind == "adamw")  // p * decay - step * m / ...: this file may contract it into an FMA differently
      CHECK(rel_max_diff(p, q) <= 1e-6);
    else
      CHECK(same_bits(p, q));
    CHECK(o->steps() == 3);
  }
}

TEST_CASE("backend: gemm covers all four transposes, and mix is mix_into") {
  CpuBackend be;
  Rng rng(3);
  const std::size_t m = 5, n = 4, k = 3;
  std::vector<float> a(m * k), b(k * n), c(m * n), c2(m * n);
  for (auto& v : a) v = static_cast<float>(rng.below(7)) - 3.0f;  // small integers: exact sums
  for (auto& v : b) v = static_cast<float>(rng.below(7)) - 3.0f;
  std::vector<float> at(k * m), bt(n * k);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < k; ++j) at[j * m + i] = a[i * k + j];
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j) bt[j * k + i] = b[i * n + j];
  std::vector<float> want(m * n, 0.0f);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t l = 0; l < k; ++l) want[i * n + j] += a[i * k + l] * b[l * n + j];
  be.gemm(false, false, m, n, k, a.data(), b.data(), c.data());
  CHECK(c == want);
  be.gemm(true, false, m, n, k, at.data(), b.data(), c.data());
  CHECK(c == want);
  be.gemm(false, true, m, n, k, a.data(), bt.data(), c.data());
  CHECK(c == want);
  be.gemm(true, true, m, n, k, at.data(), bt.data(), c.data());
  CHECK(c == want);
  std::vector<float> x(100), y(100), s(100);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : y) v = static_cast<float>(rng.normal());
  for (auto& v : s) v = static_cast<float>(rng.normal());
  std::vector<float> x2 = x;
  be.mix(x.data(), y.data(), s.data(), x.size(), 0.3f);
  mix_into(x2, y, s, 0.3f);
  CHECK(same_bits(x, x2));
}

TEST_CASE("backend: a Trainer on an emulated device takes the CPU Trainer's steps, and keeps the mirror rule") {
  const Task task = gaussian_mixture_task(400, 100, 20, 5, 3.0, 7);
  auto shard = std::make_shared<Dataset>(task.train);
  for (const char* opt : {"adam", "sgd"}) {
    TrainerConfig cfg;
    cfg.model = "mlp:16,8";
    cfg.optimizer.kind = opt;
    cfg.schedule.base_lr = 0.01;
    cfg.batch = 32;
    Trainer cpu(cfg, shard, 20, 5);
    auto dev = std::make_shared<EmulatedDevice>();
    cfg.backend = dev;
    Trainer gpu(cfg, shard, 20, 5);
    REQUIRE(gpu.on_device());
    REQUIRE_FALSE(cpu.on_device());
    CHECK(same_bits(cpu.params(), gpu.params()));  // the same initialisation, mirrored
    auto close = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::abs(a); };
    for (int s = 0; s < 30; ++s) {
      const double l1 = cpu.compute_gradient();
      const double l2 = gpu.compute_gradient();
      CHECK(close(l1, l2));
      cpu.apply_gradient();
      gpu.apply_gradient();
    }
    INFO(std::string(opt));
    CHECK(rel_max_diff(gpu.params(), cpu.params()) < 1e-5);  // the mirror is current after every step
    if (cpu.optimizer().state_size()) CHECK(rel_max_diff(gpu.optimizer_state(), cpu.optimizer_state()) < 1e-4);
    CHECK(close(cpu.evaluate(task.test).loss, gpu.evaluate(task.test).loss));

    // A mix announced with params_written() reaches the device before the next step.
    for (Trainer* t : {&cpu, &gpu}) {
      for (float& v : t->params()) v *= 0.5f;
      t->params_written();
    }
    const std::size_t up = dev->uploaded_bytes;
    CHECK(close(cpu.evaluate(task.test).loss, gpu.evaluate(task.test).loss));
    CHECK(dev->uploaded_bytes - up == gpu.params().size() * sizeof(float) + task.test.x.size() * sizeof(float));
    CHECK(gpu.evaluate(task.test).loss == gpu.evaluate(task.test).loss);  // two more: no parameters to upload
    CHECK(dev->uploaded_bytes - up == gpu.params().size() * sizeof(float) + 3 * task.test.x.size() * sizeof(float));
    cpu.step();
    gpu.step();
    CHECK(rel_max_diff(gpu.params(), cpu.params()) < 1e-5);

    // An unannounced write is overwritten by the device's parameters at the next step.
    const std::vector<float> before(gpu.params().begin(), gpu.params().end());
    gpu.params()[0] += 1000.0f;
    cpu.step();
    gpu.step();
    CHECK(rel_max_diff(gpu.params(), cpu.params()) < 1e-5);
    CHECK(std::abs(gpu.params()[0] - before[0]) < 1.0f);

    // Optimizer state round trip (a checkpoint on a device).
    const std::vector<float> st(gpu.optimizer_state().begin(), gpu.optimizer_state().end());
    gpu.set_optimizer_state(st, gpu.optimizer().steps());
    CHECK(same_bits(gpu.optimizer_state(), st));
    CHECK_THROWS_AS(gpu.set_optimizer_state(std::vector<float>(3), 1), std::invalid_argument);
  }
}

TEST_CASE("backend: the model's host entry points stage through a device backend and agree with the CPU") {
  auto dev = std::make_shared<EmulatedDevice>();
  auto m_cpu = make_model("mlp:12,6", 9, 4);
  auto m_dev = make_model("mlp:12,6", 9, 4, dev);
  CHECK(&m_dev->backend() == dev.get());
  Rng rng(2);
  std::vector<float> p(m_cpu->param_count()), g1(p.size()), g2(p.size());
  m_cpu->init(p, rng);
  std::vector<float> x(8 * 9);
  std::vector<std::int32_t> y(8);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : y) v = static_cast<std::int32_t>(rng.below(4));
  const double l1 = m_cpu->loss_and_grad(p, x.data(), 8, y.data(), nullptr, g1);
  const double l2 = m_dev->loss_and_grad(p, x.data(), 8, y.data(), nullptr, g2);
  CHECK(std::abs(l1 - l2) <= 1e-6 * l1);
  CHECK(rel_max_diff(g2, g1) < 1e-6);
  CHECK(dev->downloaded_bytes >= g2.size() * sizeof(float));
  y[3] = 4;  // out of range: refused before anything reaches the device
  CHECK_THROWS(m_dev->loss_and_grad(p, x.data(), 8, y.data(), nullptr, g2));
}
