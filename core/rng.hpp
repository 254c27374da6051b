// Rumor's only source of randomness: a seeded xoshiro256** generator.
//
// Contract: the same seed gives the same stream on every platform, so a simulator run or a data
// split is reproducible. Nothing in core/ may draw from the OS; every component that needs
// randomness is handed an Rng (or a seed derived with `fork`) from the one seed in the Config.
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>
#include <vector>

namespace rumor {

class Rng {
 public:
  using result_type = std::uint64_t;
  explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    std::uint64_t z = seed;
    for (auto& w : s_) w = splitmix64(z);
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }

  result_type operator()() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // A child generator for a named sub-component (peer i, shard split, ...): independent of
  // the parent's later draws, so adding a component does not shift the others' streams.
  Rng fork(std::uint64_t stream) const {
    std::uint64_t z = s_[0] ^ (s_[3] + 0x9E3779B97F4A7C15ULL * (stream + 1));
    return Rng(splitmix64(z));
  }

  double uniform() { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }  // [0,1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) without modulo bias (Lemire's method).
  std::uint64_t below(std::uint64_t n) {
    if (n == 0) return 0;
    for (;;) {
      unsigned __int128 m = static_cast<unsigned __int128>((*this)()) * n;
      auto lo = static_cast<std::uint64_t>(m);
      if (lo >= n || lo >= (-n) % n) return static_cast<std::uint64_t>(m >> 64);
    }
  }
  // Standard normal (Box-Muller; the spare is kept so the stream stays deterministic).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2.0 * std::log(u1));
    double th = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(th);
    has_spare_ = true;
    return r * std::cos(th);
  }
  double normal(double mean, double sd) { return mean + sd * normal(); }
  double exponential(double rate) { return -std::log(1.0 - uniform()) / rate; }
  // Gamma(shape, 1) by Marsaglia-Tsang; used for Dirichlet draws.
  double gamma(double shape) {
    if (shape < 1.0) {
      double u = uniform();
      return gamma(shape + 1.0) * std::pow(u < 1e-300 ? 1e-300 : u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = normal(), v = 1.0 + c * x;
      if (v <= 0) continue;
      v = v * v * v;
      double u = uniform();
      if (u < 1 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
    }
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4]{};
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace rumor
