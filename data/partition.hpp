// Splitting a data set among the peers of a swarm: the partition rule (iid, dirichlet:ALPHA,
// labels:K), the shard spec ("K/N") and the rows of every shard, computed from a seed so that
// every peer derives the same split without talking to the others. Not the order rows are
// visited in within a shard (batch_order.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace rumor {

struct Partition {
  enum class Kind { Iid, Dirichlet, Labels } kind = Kind::Iid;
  double alpha = 1.0;  // Dirichlet concentration; smaller = more label skew
  int labels = 2;      // Labels: classes per shard
  // "iid", "dirichlet:ALPHA" or "labels:K"; throws DataError with the accepted forms otherwise.
  static Partition parse(const std::string& spec);
  std::string str() const;
};
struct ShardSpec {
  int k = 1, n = 1;  // shard k of n, 1-based
  // "K/N" with 1 <= K <= N; throws DataError otherwise.
  static ShardSpec parse(const std::string& spec);
};
// Row indices of every shard (n lists): disjoint and together covering all rows. Iid: a seeded
// permutation cut into n near-equal parts. Dirichlet: for each class, its rows are split among
// the shards in proportions drawn from Dirichlet(alpha) (regression sets fall back to iid).
// Labels:K: every shard holds exactly min(K, classes) distinct classes. Slot s = i*K + j of
// shard i (j < K) is class perm_{s / C}[s mod C], perm_r seeded permutations of the C classes
// (a class repeated within a shard, where its slots span two permutations, is replaced by
// the next class of the later permutation it lacks), so with n*K >= C every class is held;
// a class's rows are split evenly among its holders. n*K < C is a DataError.
std::vector<std::vector<std::size_t>> partition_rows(const Dataset& d, int n, const Partition& p,
                                                     std::uint64_t seed);
// Convenience: the one shard this peer trains on.
Dataset make_shard(const Dataset& d, const ShardSpec& s, const Partition& p, std::uint64_t seed);
// The same rows as make_shard (in another order), compacted in place inside `d`'s buffers so
// a peer never holds the full training set and its shard at once.
Dataset take_shard(Dataset&& d, const ShardSpec& s, const Partition& p, std::uint64_t seed);

}  // namespace rumor
