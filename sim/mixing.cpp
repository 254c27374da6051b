// Communication graphs, mixing matrices and their spectra (mixing.hpp).
#include "sim/mixing.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "core/check.hpp"
#include "core/rng.hpp"
#include "sim/topology.hpp"

namespace rumor::sim {

namespace {

std::uint32_t ceil_log2(std::uint32_t n) {
  std::uint32_t k = 0;
  while ((std::uint64_t{1} << k) < n) ++k;
  return k;
}

Graph from_out(std::vector<std::vector<std::uint32_t>> out) {
  Graph g;
  const std::size_t n = out.size();
  g.in.assign(n, {});
  for (std::uint32_t i = 0; i < n; ++i) {
    std::sort(out[i].begin(), out[i].end());
    out[i].erase(std::unique(out[i].begin(), out[i].end()), out[i].end());
    out[i].erase(std::remove(out[i].begin(), out[i].end(), i), out[i].end());
    for (auto j : out[i]) g.in[j].push_back(i);
  }
  for (auto& v : g.in) std::sort(v.begin(), v.end());
  g.out = std::move(out);
  return g;
}

// A random d-regular simple graph: pair the n d "points" (d per node) one pair at a time, each
// pair drawn uniformly among the points left and accepted only if it makes no loop and no
// double edge; when too many draws in a row fail, start over (Steger and Wormald, 1999).
std::vector<std::vector<std::uint32_t>> random_regular(std::uint32_t n, std::uint32_t d, Rng rng) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::vector<std::uint32_t> points;
    for (std::uint32_t i = 0; i < n; ++i)
      for (std::uint32_t k = 0; k < d; ++k) points.push_back(i);
    std::vector<std::set<std::uint32_t>> adj(n);
    bool stuck = false;
    while (!points.empty() && !stuck) {
      bool paired = false;
      for (int tries = 0; tries < 200 && !paired; ++tries) {
        const std::size_t a = rng.below(points.size()), b = rng.below(points.size());
        const std::uint32_t u = points[a], v = points[b];
        if (a == b || u == v || adj[u].count(v)) continue;
        adj[u].insert(v);
        adj[v].insert(u);
        // Remove the larger index first so the smaller stays valid.
        for (std::size_t idx : {std::max(a, b), std::min(a, b)}) {
          points[idx] = points.back();
          points.pop_back();
        }
        paired = true;
      }
      stuck = !paired;
    }
    if (stuck) continue;
    std::vector<std::vector<std::uint32_t>> out(n);
    for (std::uint32_t i = 0; i < n; ++i) out[i].assign(adj[i].begin(), adj[i].end());
    return out;
  }
  throw std::invalid_argument("random_regular: no simple " + std::to_string(d) + "-regular graph on " +
                              std::to_string(n) + " nodes found in 1000 attempts");
}

}  // namespace

CommGraph::CommGraph(Topology t, std::uint32_t n, std::uint32_t degree, std::uint64_t seed) : n_(n) {
  if (n < 1) throw std::invalid_argument("a graph needs at least one node");
  const std::uint32_t tau = std::max<std::uint32_t>(ceil_log2(n), 1);
  switch (t) {
    case Topology::Complete: {
      std::vector<std::vector<std::uint32_t>> out(n);
      for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t j = 0; j < n; ++j)
          if (j != i) out[i].push_back(j);
      rounds_.push_back(from_out(std::move(out)));
      break;
    }
    case Topology::Ring:
    case Topology::Torus:
    case Topology::Hypercube:
    case Topology::Exponential: {
      if (t == Topology::Hypercube && (n & (n - 1)) != 0)
        throw std::invalid_argument("a hypercube needs a power-of-two number of peers, have " + std::to_string(n));
      std::vector<std::vector<std::uint32_t>> out(n);
      for (std::uint32_t i = 0; i < n; ++i) out[i] = topology_neighbours(t, i, n);
      rounds_.push_back(from_out(std::move(out)));
      break;
    }
    case Topology::RandomRegular: {
      if (degree >= n || (static_cast<std::uint64_t>(n) * degree) % 2 != 0)
        throw std::invalid_argument("random_regular: needs degree < peers and peers * degree even");
      rounds_.push_back(from_out(random_regular(n, degree, Rng(seed))));
      break;
    }
    case Topology::RandomDirected: {
      if (degree >= n) throw std::invalid_argument("random_directed: needs degree < peers");
      directed_ = true;
      Rng rng(seed);
      std::vector<std::vector<std::uint32_t>> out(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        // The ring edge i -> i+1 keeps the graph strongly connected; the rest are random.
        out[i].push_back((i + 1) % n);
        while (out[i].size() < degree) {
          const auto j = static_cast<std::uint32_t>(rng.below(n));
          if (j != i && std::find(out[i].begin(), out[i].end(), j) == out[i].end()) out[i].push_back(j);
        }
      }
      rounds_.push_back(from_out(std::move(out)));
      break;
    }
    case Topology::DirectedExponential: {
      directed_ = true;
      std::vector<std::vector<std::uint32_t>> out(n);
      for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t k = 0; k < tau; ++k) out[i].push_back(static_cast<std::uint32_t>((i + (std::uint64_t{1} << k)) % n));
      rounds_.push_back(from_out(std::move(out)));
      break;
    }
    case Topology::OnePeerExponential: {
      directed_ = true;
      for (std::uint32_t k = 0; k < tau; ++k) {
        std::vector<std::vector<std::uint32_t>> out(n);
        for (std::uint32_t i = 0; i < n; ++i) out[i].push_back(static_cast<std::uint32_t>((i + (std::uint64_t{1} << k)) % n));
        rounds_.push_back(from_out(std::move(out)));
      }
      break;
    }
  }
}

Mixing dpsgd_mixing(const Graph& g, MixingWeights w) {
  const std::size_t n = g.in.size();
  Mixing m(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    MixingRow& row = m[i];
    if (w == MixingWeights::Uniform) {
      const double v = 1.0 / static_cast<double>(g.in[i].size() + 1);
      for (auto j : g.in[i]) row.emplace_back(j, v);
      row.emplace_back(i, v);
    } else {
      double sum = 0;
      for (auto j : g.in[i]) {
        const double v = 1.0 / static_cast<double>(1 + std::max(g.in[i].size(), g.in[j].size()));
        row.emplace_back(j, v);
        sum += v;
      }
      row.emplace_back(i, 1.0 - sum);
    }
    std::sort(row.begin(), row.end());
  }
  return m;
}

Mixing push_sum_mixing(const Graph& g) {
  const std::size_t n = g.in.size();
  Mixing m(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (auto j : g.in[i]) m[i].emplace_back(j, 1.0 / static_cast<double>(g.out[j].size() + 1));
    m[i].emplace_back(i, 1.0 / static_cast<double>(g.out[i].size() + 1));
    std::sort(m[i].begin(), m[i].end());
  }
  return m;
}

Spectrum mixing_spectrum(const std::vector<Mixing>& period, std::uint32_t n) {
  RUMOR_CHECK(!period.empty() && n >= 1);
  if (n > 2048) throw std::invalid_argument("mixing_spectrum: more than 2048 nodes");
  Eigen::MatrixXd prod = Eigen::MatrixXd::Identity(n, n);
  for (const Mixing& w : period) {
    Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
    for (std::uint32_t i = 0; i < n; ++i)
      for (const auto& [j, v] : w[i]) m(i, j) += v;
    prod = m * prod;
  }
  Spectrum sp;
  sp.period = static_cast<std::uint32_t>(period.size());
  if (n == 1) return sp;
  std::vector<double> mod;
  if ((prod - prod.transpose()).cwiseAbs().maxCoeff() < 1e-14) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(prod, Eigen::EigenvaluesOnly);
    for (Eigen::Index k = 0; k < es.eigenvalues().size(); ++k) mod.push_back(std::abs(es.eigenvalues()(k)));
  } else {
    Eigen::EigenSolver<Eigen::MatrixXd> es(prod, false);
    for (Eigen::Index k = 0; k < es.eigenvalues().size(); ++k) mod.push_back(std::abs(es.eigenvalues()(k)));
  }
  std::sort(mod.begin(), mod.end(), std::greater<>());
  // The largest is 1 (stochastic); the second largest modulus rules the contraction.
  sp.slem = mod[1];
  sp.slem_per_round = std::pow(sp.slem, 1.0 / static_cast<double>(sp.period));
  return sp;
}

}  // namespace rumor::sim
