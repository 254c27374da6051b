// The CPU backend: Eigen's GEMM for the products, plain loops over raw pointers for the rest
// (written so the compiler vectorises them). These are the exact expressions the models, the
// optimizers and mix_into used before the backend interface existed, so CPU numbers are
// bit-for-bit what they were (tests/core/test_backend.cpp checks against a copy of the old code).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/mix.hpp"

namespace rumor {
namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using MapConstMat = Eigen::Map<const RowMat>;
using MapVec = Eigen::Map<Eigen::RowVectorXf>;
constexpr std::size_t kAlign = 64;  // a cache line (and Eigen's widest packet)
}  // namespace

void* CpuBackend::allocate(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}
void CpuBackend::deallocate(void* p) noexcept { std::free(p); }
void CpuBackend::upload(void* dst, const void* src, std::size_t bytes) {
  if (dst != src) std::memcpy(dst, src, bytes);
}
void CpuBackend::download(void* dst, const void* src, std::size_t bytes) {
  if (dst != src) std::memcpy(dst, src, bytes);
}

void CpuBackend::gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
                      const float* b, float* c) {
  MapMat cm(c, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  const auto M = static_cast<Eigen::Index>(m), N = static_cast<Eigen::Index>(n), K = static_cast<Eigen::Index>(k);
  if (!trans_a && !trans_b)
    cm.noalias() = MapConstMat(a, M, K) * MapConstMat(b, K, N);
  else if (trans_a && !trans_b)
    cm.noalias() = MapConstMat(a, K, M).transpose() * MapConstMat(b, K, N);
  else if (!trans_a && trans_b)
    cm.noalias() = MapConstMat(a, M, K) * MapConstMat(b, N, K).transpose();
  else
    cm.noalias() = MapConstMat(a, K, M).transpose() * MapConstMat(b, N, K).transpose();
}

void CpuBackend::bias_activation(float* pa, const float* pb, std::size_t rows, std::size_t C, bool relu) {
  // Bias, then ReLU on hidden layers, fused in one pass.
  for (std::size_t i = 0; i < rows; ++i) {
    float* row = pa + i * C;
    if (relu)
      for (std::size_t c = 0; c < C; ++c) row[c] = std::max(row[c] + pb[c], 0.0f);
    else
      for (std::size_t c = 0; c < C; ++c) row[c] += pb[c];
  }
}

void CpuBackend::relu_backward(float* pd, const float* a, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) pd[i] = a[i] > 0.0f ? pd[i] : 0.0f;
}

void CpuBackend::column_sum(const float* d, std::size_t rows, std::size_t cols, float* out) {
  // Eigen picks its summation order from the alignment it knows of: a source known to be
  // aligned (as the models' own matrices were before this interface, and as Buffers are) is
  // summed exactly as then. The order also depends on where `out` falls (its unaligned head is
  // summed in scalar), so bias gradients are reproducible for a given buffer layout, not
  // across arbitrary addresses.
  MapVec gb(out, static_cast<Eigen::Index>(cols));
  const auto R = static_cast<Eigen::Index>(rows), C = static_cast<Eigen::Index>(cols);
  if (reinterpret_cast<std::uintptr_t>(d) % EIGEN_MAX_ALIGN_BYTES == 0)
    gb.noalias() = Eigen::Map<const RowMat, Eigen::AlignedMax>(d, R, C).colwise().sum();
  else
    gb.noalias() = MapConstMat(d, R, C).colwise().sum();
}

double CpuBackend::softmax_cross_entropy(const float* out, const std::int32_t* labels, std::size_t rows,
                                         std::size_t C, float* delta) {
  const float inv_b = 1.0f / static_cast<float>(rows);
  double loss = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* z = out + i * C;
    float* g = delta + i * C;
    const std::int32_t y = labels[i];
    RUMOR_CHECK(y >= 0 && static_cast<std::size_t>(y) < C, "label out of range");
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
  }
  return loss / static_cast<double>(rows);
}

double CpuBackend::squared_error(const float* out, const float* targets, std::size_t rows, std::size_t C,
                                 float* delta) {
  const float inv_b = 1.0f / static_cast<float>(rows);
  double loss = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* z = out + i * C;
    float* g = delta + i * C;
    const float* t = targets + i * C;
    for (std::size_t c = 0; c < C; ++c) {
      const float e = z[c] - t[c];
      g[c] = e * inv_b;
      loss += 0.5 * static_cast<double>(e) * e;
    }
  }
  return loss / static_cast<double>(rows);
}

void CpuBackend::gather_rows(const float* src, const std::int32_t* idx, std::size_t rows, std::size_t dim,
                             float* dst) {
  for (std::size_t i = 0; i < rows; ++i) std::copy_n(src + static_cast<std::size_t>(idx[i]) * dim, dim, dst + i * dim);
}
void CpuBackend::gather_labels(const std::int32_t* src, const std::int32_t* idx, std::size_t rows,
                               std::int32_t* dst) {
  for (std::size_t i = 0; i < rows; ++i) dst[i] = src[idx[i]];
}

void CpuBackend::sgd_update(float* __restrict p, const float* __restrict g, float* __restrict v, std::size_t n,
                            const SgdUpdate& u) {
  const float wd = u.weight_decay, mu = u.momentum, a = u.lr;
  if (!v) {
    for (std::size_t i = 0; i < n; ++i) p[i] -= a * (g[i] + wd * p[i]);
  } else if (u.nesterov) {
    // PyTorch convention: v <- mu v + g;  p <- p - lr v  (Nesterov: p <- p - lr (g + mu v)).
    for (std::size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * p[i];
      v[i] = mu * v[i] + gi;
      p[i] -= a * (gi + mu * v[i]);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * p[i];
      v[i] = mu * v[i] + gi;
      p[i] -= a * v[i];
    }
  }
}

void CpuBackend::adam_update(float* __restrict p, const float* __restrict g, float* __restrict m,
                             float* __restrict v, std::size_t n, const AdamUpdate& u) {
  const float step = u.step, inv_sqrt_bc2 = u.inv_sqrt_bc2, b1 = u.beta1, b2 = u.beta2, eps = u.eps,
              wd = u.weight_decay, decay = u.decay;
  const bool decoupled = u.decoupled;
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = decoupled ? g[i] : g[i] + wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] = p[i] * decay - step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

void CpuBackend::mix(float* x, const float* m, const float* snap, std::size_t n, float w) {
  mix_into(std::span<float>(x, n), std::span<const float>(m, n), std::span<const float>(snap, n), w);
}

std::shared_ptr<Backend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

void EmulatedDevice::upload(void* dst, const void* src, std::size_t bytes) {
  uploaded_bytes += bytes;
  std::memcpy(dst, src, bytes);
}
void EmulatedDevice::download(void* dst, const void* src, std::size_t bytes) {
  downloaded_bytes += bytes;
  std::memcpy(dst, src, bytes);
}

}  // namespace rumor
