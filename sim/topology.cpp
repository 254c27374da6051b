// Topologies (see topology.hpp for the definitions).
#include "sim/topology.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.hpp"

namespace rumor::sim {

namespace {
std::uint32_t torus_rows(std::uint32_t n) {
  std::uint32_t r = static_cast<std::uint32_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && n % r != 0) --r;
  return std::max<std::uint32_t>(r, 1);
}
}  // namespace

std::vector<std::uint32_t> topology_neighbours(Topology t, std::uint32_t i, std::uint32_t n) {
  RUMOR_CHECK(i < n);
  std::vector<std::uint32_t> out;
  if (n <= 1) return out;
  const auto add = [&](std::int64_t j) {
    const auto k = static_cast<std::uint32_t>(((j % n) + n) % n);
    if (k != i) out.push_back(k);
  };
  switch (t) {
    case Topology::Complete:
      return out;
    case Topology::Ring:
      add(std::int64_t(i) - 1);
      add(std::int64_t(i) + 1);
      break;
    case Topology::Torus: {
      const std::uint32_t r = torus_rows(n), c = n / r;
      const std::uint32_t row = i / c, col = i % c;
      if (r > 1) {
        out.push_back(((row + r - 1) % r) * c + col);
        out.push_back(((row + 1) % r) * c + col);
      }
      out.push_back(row * c + (col + c - 1) % c);
      out.push_back(row * c + (col + 1) % c);
      out.erase(std::remove(out.begin(), out.end(), i), out.end());
      break;
    }
    case Topology::Hypercube:
      RUMOR_CHECK((n & (n - 1)) == 0, "a hypercube needs a power-of-two size");
      for (std::uint32_t b = 1; b < n; b <<= 1) out.push_back(i ^ b);
      break;
    case Topology::Exponential:
      for (std::int64_t step = 1; step < n; step <<= 1) {
        add(std::int64_t(i) + step);
        add(std::int64_t(i) - step);
      }
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double pairwise_gossip_mu(Topology t, std::uint32_t n, int iterations) {
  RUMOR_CHECK(n >= 2 && n <= 4096, "pairwise_gossip_mu is for small graphs");
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::vector<std::uint32_t> nb = topology_neighbours(t, i, n);
    if (t == Topology::Complete)
      for (std::uint32_t j = 0; j < n; ++j)
        if (j != i) nb.push_back(j);
    for (auto j : nb)
      if (i < j) edges.emplace_back(i, j);
  }
  // Regular graph: each edge is picked with probability 2 / (n d) = 1 / |E|.
  const double p = 1.0 / static_cast<double>(edges.size());
  const std::size_t N = n;
  std::vector<double> s(N * N), next(N * N);
  // A deterministic start with S 1 = 0 and weight on every mode: y = cos-like ramp, centred.
  std::vector<double> y(N);
  double mean = 0;
  for (std::size_t i = 0; i < N; ++i) mean += (y[i] = std::sin(1.0 + 2.3 * static_cast<double>(i * i % 97)));
  mean /= static_cast<double>(N);
  for (auto& v : y) v -= mean;
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t c = 0; c < N; ++c) s[r * N + c] = y[r] * y[c];
  double mu = 1;
  for (int it = 0; it < iterations; ++it) {
    // next = sum_e p W_e S W_e = S + sum_e p (W_e S W_e - S); W_e S W_e differs from S only in
    // rows and columns i, j, where it is the average of the two.
    next = s;
    for (const auto& [i, j] : edges) {
      for (std::size_t r = 0; r < N; ++r) {
        if (r == i || r == j) continue;
        const double avg = 0.5 * (s[r * N + i] + s[r * N + j]);
        next[r * N + i] += p * (avg - s[r * N + i]);
        next[r * N + j] += p * (avg - s[r * N + j]);
        next[i * N + r] += p * (avg - s[i * N + r]);
        next[j * N + r] += p * (avg - s[j * N + r]);
      }
      const double q = 0.25 * (s[i * N + i] + s[i * N + j] + s[j * N + i] + s[j * N + j]);
      next[i * N + i] += p * (q - s[i * N + i]);
      next[i * N + j] += p * (q - s[i * N + j]);
      next[j * N + i] += p * (q - s[j * N + i]);
      next[j * N + j] += p * (q - s[j * N + j]);
    }
    // Keep S 1 = 0 exactly: rounding would otherwise let the consensus direction (eigenvalue
    // 1) creep in, and power iteration would find it. S <- P S P, P = I - 1 1^T / n.
    {
      std::vector<double> row(N, 0.0), col(N, 0.0);
      double all = 0;
      for (std::size_t r = 0; r < N; ++r)
        for (std::size_t c = 0; c < N; ++c) {
          row[r] += next[r * N + c];
          col[c] += next[r * N + c];
          all += next[r * N + c];
        }
      const double inv = 1.0 / static_cast<double>(N);
      for (std::size_t r = 0; r < N; ++r)
        for (std::size_t c = 0; c < N; ++c) next[r * N + c] += (all * inv - row[r] - col[c]) * inv;
    }
    double tr0 = 0, tr1 = 0;
    for (std::size_t k = 0; k < N; ++k) {
      tr0 += s[k * N + k];
      tr1 += next[k * N + k];
    }
    mu = tr1 / tr0;
    for (auto& v : next) v /= tr1;
    s.swap(next);
  }
  return mu;
}

}  // namespace rumor::sim
