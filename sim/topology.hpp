// Named communication graphs over peer indices 0..n-1, for GossipConfig::neighbours: a peer
// only starts exchanges with its neighbours (it still answers anyone who asks, as the protocol
// does). Every graph here is undirected, so a pairwise exchange is a use of one edge.
//
//   ring         i-1, i+1 (mod n)                                  degree 2
//   torus        r x c grid with wrap-around, r = the largest divisor of n <= sqrt(n)
//                (n = 1000 is 25 x 40; a prime n degenerates to a ring)   degree 4
//   hypercube    i xor 2^k for every bit k; n must be a power of two    degree log2 n
//   exponential  i +- 2^k (mod n) for 2^k < n (Assran et al.'s SGP graph, made undirected)
//   complete     everyone: returned as an empty list ("any live member")
#pragma once
#include <cstdint>
#include <vector>

#include "sim/scenario.hpp"

namespace rumor::sim {

// Sorted, without i itself and without duplicates.
std::vector<std::uint32_t> topology_neighbours(Topology t, std::uint32_t i, std::uint32_t n);

// Randomised pairwise gossip on this graph (Boyd et al., "Randomized gossip algorithms", 2006):
// an exchange picks a uniform random peer i and a uniform random neighbour j of it, and both
// take (x_i + x_j) / 2. Returns mu, the factor by which one exchange shrinks the expected
// squared distance to consensus E sum_i (x_i - mean)^2 in the long run: the top eigenvalue of
// S -> E[W S W] on symmetric S with S 1 = 0 (power iteration, O(iterations * edges * n)). For
// the complete graph mu = 1 - 1/(n-1) exactly. The graph must be regular (all named ones are).
double pairwise_gossip_mu(Topology t, std::uint32_t n, int iterations = 4000);

}  // namespace rumor::sim
