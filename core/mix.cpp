#include "core/mix.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.hpp"

namespace rumor {

void mix_into(std::span<float> x, std::span<const float> m, std::span<const float> snap, double w) {
  RUMOR_CHECK(x.size() == m.size() && x.size() == snap.size());
  const float wf = static_cast<float>(w);
  float* __restrict px = x.data();
  const float* __restrict pm = m.data();
  const float* __restrict ps = snap.data();
  for (std::size_t i = 0, n = x.size(); i < n; ++i) px[i] += wf * (pm[i] - ps[i]);
}

bool all_finite(std::span<const float> v) {
  // A float is NaN or Inf iff its exponent bits are all ones: an OR over integer bits, which
  // vectorises (a float sum would be a serial chain of adds).
  const auto* bits = reinterpret_cast<const std::uint32_t*>(v.data());
  std::uint32_t bad = 0;
  for (std::size_t i = 0, n = v.size(); i < n; ++i) bad |= static_cast<std::uint32_t>((bits[i] & 0x7F800000u) == 0x7F800000u);
  return bad == 0;
}

double l2_norm(std::span<const float> v) {
  double s = 0;
  const float* p = v.data();
#pragma omp simd reduction(+ : s)
  for (std::size_t i = 0; i < v.size(); ++i) s += static_cast<double>(p[i]) * p[i];
  return std::sqrt(s);
}

double relative_distance(std::span<const float> a, std::span<const float> b) {
  RUMOR_CHECK(a.size() == b.size());
  double d = 0, na = 0, nb = 0;
  const float* pa = a.data();
  const float* pb = b.data();
  // `omp simd` lets the three sums be split across vector lanes (a fixed, deterministic
  // reordering: the same inputs always give the same result).
#pragma omp simd reduction(+ : d, na, nb)
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = pa[i], y = pb[i];
    d += (x - y) * (x - y);
    na += x * x;
    nb += y * y;
  }
  return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

double mix_into_with_distance(std::span<float> x, std::span<const float> m, std::span<const float> snap, double w) {
  RUMOR_CHECK(x.size() == m.size() && x.size() == snap.size());
  const float wf = static_cast<float>(w);
  float* __restrict px = x.data();
  const float* __restrict pm = m.data();
  const float* __restrict ps = snap.data();
  double d = 0, na = 0, nb = 0;
#pragma omp simd reduction(+ : d, na, nb)
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = ps[i], b = pm[i];
    d += (a - b) * (a - b);
    na += a * a;
    nb += b * b;
    px[i] += wf * (pm[i] - ps[i]);
  }
  return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

}  // namespace rumor
