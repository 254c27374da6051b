// The mixing arithmetic (mix.hpp): mix_into (the overlap rule's x += w (m - s)), finiteness,
// norms and relative distances, and mix_into_with_distance, which mixes and measures the
// distance between the two snapshots in one pass, over flat spans or chunked Pieces. Pure
// arithmetic: the weights are chosen by Gossip.
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

namespace {
struct DistanceSums {
  double d = 0, na = 0, nb = 0;
  double relative() const { return std::sqrt(d) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30}); }
};

void mix_with_sums(float* __restrict px, const float* __restrict pm, const float* __restrict ps, std::size_t n, float wf,
                   DistanceSums& s) {
  double d = 0, na = 0, nb = 0;
#pragma omp simd reduction(+ : d, na, nb)
  for (std::size_t i = 0; i < n; ++i) {
    const double a = ps[i], b = pm[i];
    d += (a - b) * (a - b);
    na += a * a;
    nb += b * b;
    px[i] += wf * (pm[i] - ps[i]);
  }
  s.d += d;
  s.na += na;
  s.nb += nb;
}
}  // namespace

double mix_into_with_distance(std::span<float> x, std::span<const float> m, std::span<const float> snap, double w) {
  RUMOR_CHECK(x.size() == m.size() && x.size() == snap.size());
  DistanceSums s;
  mix_with_sums(x.data(), m.data(), snap.data(), x.size(), static_cast<float>(w), s);
  return s.relative();
}

std::size_t Pieces::size() const {
  std::size_t n = 0;
  for (const auto& p : parts) n += p.size();
  return n;
}

float Pieces::operator[](std::size_t i) const {
  for (const auto& p : parts) {
    if (i < p.size()) return p[i];
    i -= p.size();
  }
  RUMOR_CHECK(false && "Pieces: index out of range");
  return 0;
}

std::span<const float> Pieces::contiguous(std::vector<float>& scratch) const {
  if (parts.size() == 1) return parts.front();
  scratch.resize(size());
  std::size_t at = 0;
  for (const auto& p : parts) {
    std::copy(p.begin(), p.end(), scratch.begin() + static_cast<std::ptrdiff_t>(at));
    at += p.size();
  }
  return scratch;
}

double mix_into_with_distance(std::span<float> x, const Pieces& m, const Pieces& snap, double w) {
  RUMOR_CHECK(x.size() == m.size() && x.size() == snap.size());
  DistanceSums s;
  const float wf = static_cast<float>(w);
  // Walk both piece lists at once, one run at a time where neither changes part.
  std::size_t mi = 0, si = 0, mo = 0, so = 0, at = 0;
  while (at < x.size()) {
    while (mo == m.parts[mi].size()) ++mi, mo = 0;
    while (so == snap.parts[si].size()) ++si, so = 0;
    const std::size_t n = std::min(m.parts[mi].size() - mo, snap.parts[si].size() - so);
    mix_with_sums(x.data() + at, m.parts[mi].data() + mo, snap.parts[si].data() + so, n, wf, s);
    at += n;
    mo += n;
    so += n;
  }
  return s.relative();
}

}  // namespace rumor
