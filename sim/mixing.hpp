// Communication graphs and mixing matrices of the synchronous decentralized algorithms
// (D-PSGD, push-sum / SGP; sim/algorithms.hpp), and their spectra.
//
// A graph is given per round as every node's out-neighbours (whom it sends to) and
// in-neighbours (whom it hears from), never including itself. Named graphs over n nodes:
//   complete, ring, torus, hypercube, exponential   static, undirected (sim/topology.hpp)
//   random_regular     static, undirected: a uniform-ish random d-regular simple graph drawn
//                      from the seed (pairing with restarts, Steger-Wormald)
//   random_directed    static, directed: i -> i+1 and d-1 further out-neighbours drawn from
//                      the seed (strongly connected, in-degrees uneven: push-sum only)
//   directed_exp       static, directed: i -> i + 2^k (mod n), k = 0 .. ceil(log2 n) - 1
//                      (Assran et al.'s SGP graph)
//   onepeer_exp        time-varying, directed: at round t, i -> i + 2^(t mod tau) (mod n),
//                      tau = ceil(log2 n) (Ying et al. 2021, "Exponential graph is provably
//                      efficient for decentralized deep training"): one message per node per
//                      round; for n a power of two the product of tau rounds of (I + P_t)/2 is
//                      exactly 11^T/n.
//
// Mixing matrices are kept sparse by row: row i lists (j, W_ij) over j in in(i) and i itself,
// so x_i <- sum_j W_ij x_j reads only what i received.
//   D-PSGD uniform      W_ij = 1 / (|in(i)| + 1)        (doubly stochastic on regular graphs,
//                                                        which every named graph is)
//   D-PSGD metropolis   W_ij = 1 / (1 + max(d_i, d_j)), W_ii = 1 - sum_j W_ij (undirected only;
//                      on a regular graph it equals uniform)
//   push-sum (SGP)      P_ij = 1 / (|out(j)| + 1): node j splits its mass evenly among itself and
//                      its out-neighbours (column stochastic, so the total mass is conserved)
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/scenario.hpp"

namespace rumor::sim {

struct Graph {
  std::vector<std::vector<std::uint32_t>> out, in;  // sorted, without the node itself
};

class CommGraph {
 public:
  // Throws std::invalid_argument when the graph does not exist for n (a hypercube needs a power
  // of two; random_regular needs d < n and n d even).
  CommGraph(Topology t, std::uint32_t n, std::uint32_t degree, std::uint64_t seed);
  std::uint32_t size() const { return n_; }
  // Rounds after which the sequence repeats: 1 for a static graph, tau for onepeer_exp.
  std::uint32_t period() const { return static_cast<std::uint32_t>(rounds_.size()); }
  const Graph& at(std::uint64_t round) const { return rounds_[round % rounds_.size()]; }
  bool directed() const { return directed_; }

 private:
  std::uint32_t n_;
  bool directed_ = false;
  std::vector<Graph> rounds_;
};

using MixingRow = std::vector<std::pair<std::uint32_t, double>>;
using Mixing = std::vector<MixingRow>;  // row i: (j, W_ij), j ascending, i included

Mixing dpsgd_mixing(const Graph& g, MixingWeights w);
Mixing push_sum_mixing(const Graph& g);

// The second-largest eigenvalue modulus of the product of one period of mixing matrices
// (W_{tau-1} ... W_1 W_0), and its per-round rate slem^(1/period). Dense, O(n^3): for the
// sizes a study uses (n <= 2048).
struct Spectrum {
  double slem = 0;            // of the period's product
  double slem_per_round = 0;  // slem^(1/period)
  std::uint32_t period = 1;
};
Spectrum mixing_spectrum(const std::vector<Mixing>& period, std::uint32_t n);

}  // namespace rumor::sim
