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

// im2col/col2im walk the output pixels in image order and copy (or add) in_c contiguous floats
// per kernel tap; the padding taps are zero-filled (or skipped). Each is one pass, no allocation.
void CpuBackend::im2col(const float* x, std::size_t batch, const ConvShape& s, float* col) {
  const std::size_t OH = s.out_h(), OW = s.out_w(), K = s.kernel, C = s.in_c, P = s.patch();
  const std::ptrdiff_t H = static_cast<std::ptrdiff_t>(s.in_h), W = static_cast<std::ptrdiff_t>(s.in_w);
  const std::ptrdiff_t pad = static_cast<std::ptrdiff_t>(s.pad), stride = static_cast<std::ptrdiff_t>(s.stride);
  for (std::size_t b = 0; b < batch; ++b) {
    const float* img = x + b * s.in_h * s.in_w * C;
    for (std::size_t oh = 0; oh < OH; ++oh)
      for (std::size_t ow = 0; ow < OW; ++ow) {
        float* row = col + ((b * OH + oh) * OW + ow) * P;
        const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(oh) * stride - pad;
        const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(ow) * stride - pad;
        for (std::size_t kh = 0; kh < K; ++kh) {
          const std::ptrdiff_t ih = h0 + static_cast<std::ptrdiff_t>(kh);
          float* dst = row + kh * K * C;
          if (ih < 0 || ih >= H) {
            std::fill_n(dst, K * C, 0.0f);
            continue;
          }
          const float* src = img + static_cast<std::size_t>(ih) * s.in_w * C;
          if (w0 >= 0 && w0 + static_cast<std::ptrdiff_t>(K) <= W) {  // the whole kernel row inside
            std::copy_n(src + static_cast<std::size_t>(w0) * C, K * C, dst);
            continue;
          }
          for (std::size_t kw = 0; kw < K; ++kw) {
            const std::ptrdiff_t iw = w0 + static_cast<std::ptrdiff_t>(kw);
            if (iw < 0 || iw >= W)
              std::fill_n(dst + kw * C, C, 0.0f);
            else
              std::copy_n(src + static_cast<std::size_t>(iw) * C, C, dst + kw * C);
          }
        }
      }
  }
}

void CpuBackend::col2im(const float* col, std::size_t batch, const ConvShape& s, float* x) {
  const std::size_t OH = s.out_h(), OW = s.out_w(), K = s.kernel, C = s.in_c, P = s.patch();
  const std::ptrdiff_t H = static_cast<std::ptrdiff_t>(s.in_h), W = static_cast<std::ptrdiff_t>(s.in_w);
  const std::ptrdiff_t pad = static_cast<std::ptrdiff_t>(s.pad), stride = static_cast<std::ptrdiff_t>(s.stride);
  std::fill_n(x, batch * s.in_h * s.in_w * C, 0.0f);
  for (std::size_t b = 0; b < batch; ++b) {
    float* img = x + b * s.in_h * s.in_w * C;
    for (std::size_t oh = 0; oh < OH; ++oh)
      for (std::size_t ow = 0; ow < OW; ++ow) {
        const float* row = col + ((b * OH + oh) * OW + ow) * P;
        const std::ptrdiff_t h0 = static_cast<std::ptrdiff_t>(oh) * stride - pad;
        const std::ptrdiff_t w0 = static_cast<std::ptrdiff_t>(ow) * stride - pad;
        for (std::size_t kh = 0; kh < K; ++kh) {
          const std::ptrdiff_t ih = h0 + static_cast<std::ptrdiff_t>(kh);
          if (ih < 0 || ih >= H) continue;
          float* dst = img + static_cast<std::size_t>(ih) * s.in_w * C;
          const float* src = row + kh * K * C;
          for (std::size_t kw = 0; kw < K; ++kw) {
            const std::ptrdiff_t iw = w0 + static_cast<std::ptrdiff_t>(kw);
            if (iw < 0 || iw >= W) continue;
            float* d = dst + static_cast<std::size_t>(iw) * C;
            const float* v = src + kw * C;
            for (std::size_t c = 0; c < C; ++c) d[c] += v[c];
          }
        }
      }
  }
}

void CpuBackend::maxpool_forward(const float* x, std::size_t batch, const PoolShape& s, float* y,
                                 std::int32_t* argmax) {
  const std::size_t OH = s.out_h(), OW = s.out_w(), K = s.window, C = s.c;
  for (std::size_t b = 0; b < batch; ++b) {
    const float* img = x + b * s.in_h * s.in_w * C;
    for (std::size_t oh = 0; oh < OH; ++oh)
      for (std::size_t ow = 0; ow < OW; ++ow) {
        const std::size_t o = ((b * OH + oh) * OW + ow) * C;
        float* out = y + o;
        std::int32_t* am = argmax + o;
        // The tile's first pixel, then a strict > over the rest: the first maximum wins.
        const std::size_t first = ((oh * K) * s.in_w + ow * K) * C;
        for (std::size_t c = 0; c < C; ++c) {
          out[c] = img[first + c];
          am[c] = static_cast<std::int32_t>(first + c);
        }
        for (std::size_t kh = 0; kh < K; ++kh)
          for (std::size_t kw = 0; kw < K; ++kw) {
            if (kh == 0 && kw == 0) continue;
            const std::size_t at = ((oh * K + kh) * s.in_w + ow * K + kw) * C;
            const float* v = img + at;
            for (std::size_t c = 0; c < C; ++c)
              if (v[c] > out[c]) {
                out[c] = v[c];
                am[c] = static_cast<std::int32_t>(at + c);
              }
          }
      }
  }
}

void CpuBackend::maxpool_backward(const float* dy, const std::int32_t* argmax, std::size_t batch,
                                  const PoolShape& s, float* dx) {
  const std::size_t in = s.in_h * s.in_w * s.c, out = s.out_h() * s.out_w() * s.c;
  std::fill_n(dx, batch * in, 0.0f);
  // Tiles do not overlap, so every input receives at most one value: a plain store.
  for (std::size_t b = 0; b < batch; ++b) {
    float* img = dx + b * in;
    const float* g = dy + b * out;
    const std::int32_t* am = argmax + b * out;
    for (std::size_t i = 0; i < out; ++i) img[am[i]] = g[i];
  }
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
