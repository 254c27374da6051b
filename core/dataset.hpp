// Data sets in memory, the IDX format (Fashion-MNIST/MNIST), synthetic tasks, shards and
// partitions, and the per-epoch batch order. All pure and deterministic from a seed: reading
// files is the caller's job (files/data_files.hpp); here bytes come in.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.hpp"

namespace rumor {

// A data problem: malformed IDX bytes, inconsistent sizes, bad shard spec. `what()` names the
// file (or source) and the reason.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Bytes = std::vector<std::uint8_t>;  // same alias as core/message.hpp

struct Dataset {
  std::string name;
  std::size_t rows = 0;
  std::size_t dim = 0;
  int classes = 0;                    // > 0: classification with `labels`; 0: regression
  std::size_t target_dim = 0;         // regression: width of `targets`
  std::vector<float> x;               // rows * dim, row-major
  std::vector<std::int32_t> labels;   // rows (classification)
  std::vector<float> targets;         // rows * target_dim (regression)

  // Rows `idx` in that order (used for shards).
  Dataset subset(std::span<const std::size_t> idx) const;
};

// ---- IDX (http://yann.lecun.com/exdb/mnist/ layout) ----
struct IdxArray {
  std::uint8_t dtype = 0;                 // 0x08 = unsigned byte (the only one Fashion-MNIST uses)
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;         // row-major
};
// Inflates gzip data (magic 1f 8b); returns other bytes unchanged. `source` names the file
// in errors.
Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source);
// Inflating stops with DataError past this many bytes, so a gzip bomb cannot exhaust memory
// (the largest Fashion-MNIST file inflates to 47 MB).
constexpr std::size_t kMaxInflatedBytes = std::size_t{1} << 30;
// The same with an explicit output bound (tests use a small one).
Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source,
                       std::size_t max_inflated_bytes);
// Parses an (already inflated) IDX file. Checks magic, dtype, rank, and that the size matches
// the dimensions exactly; throws DataError naming `source` otherwise.
IdxArray parse_idx(std::span<const std::uint8_t> bytes, const std::string& source);
// Images (N x H x W, u8) and labels (N, u8) into a classification Dataset with pixels scaled
// to [0,1]; checks N matches and labels < classes.
Dataset make_image_dataset(const IdxArray& images, const IdxArray& labels, int classes,
                           const std::string& name);

// ---- Synthetic tasks (train and test drawn from the same generator) ----
struct Task {
  Dataset train, test;
};
// `classes` Gaussian clusters in `dim` dimensions, means on a sphere of radius `separation`,
// unit variance.
Task gaussian_mixture_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                           int classes, double separation, std::uint64_t seed);
// y = W x + b + noise (target_dim outputs), x standard normal.
Task linear_regression_task(std::size_t train_rows, std::size_t test_rows, std::size_t dim,
                            std::size_t target_dim, double noise_sd, std::uint64_t seed);

// ---- Shards and partitions ----
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

// ---- Batches ----
// Walks a shard in mini-batches, reshuffling at the start of every epoch from its seed.
// The last batch of an epoch may be smaller.
class BatchOrder {
 public:
  BatchOrder(std::size_t rows, std::size_t batch, std::uint64_t seed);
  // Indices of the next batch; advances epochs as needed. The span stays valid until the next
  // call to next() or seek().
  std::span<const std::size_t> next();
  std::size_t epoch() const { return epoch_; }            // completed epochs
  std::size_t position() const { return pos_; }           // index within the epoch
  std::size_t batches_per_epoch() const;
  // Jump to a saved position (checkpoints / state transfer): epoch e, offset pos.
  void seek(std::size_t epoch, std::size_t pos);

 private:
  void reshuffle();
  std::size_t rows_, batch_;
  std::uint64_t seed_;
  std::size_t epoch_ = 0, pos_ = 0;
  std::vector<std::size_t> order_;
  std::vector<std::size_t> current_;  // the batch next() returned (order_ may have reshuffled)
};

// Copies rows `idx` of `d` into contiguous batch buffers (x: n*dim; labels or targets).
void gather_batch(const Dataset& d, std::span<const std::size_t> idx, std::vector<float>& x,
                  std::vector<std::int32_t>& labels, std::vector<float>& targets);

}  // namespace rumor
