#include "core/mix.hpp"

#include <algorithm>
#include <cmath>

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
  // Sum of x*0 is NaN iff some x is NaN or Inf; branch-free so it vectorises.
  float acc = 0.0f;
  for (float f : v) acc += f * 0.0f;
  return acc == 0.0f;
}

double l2_norm(std::span<const float> v) {
  double s = 0;
  for (float f : v) s += static_cast<double>(f) * f;
  return std::sqrt(s);
}

double relative_distance(std::span<const float> a, std::span<const float> b) {
  RUMOR_CHECK(a.size() == b.size());
  double d = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    d += (x - y) * (x - y);
    na += x * x;
    nb += y * y;
  }
  return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

}  // namespace rumor
