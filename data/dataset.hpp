// A data set in memory (Dataset), a train/test pair (Task) and the error every data/ function
// throws on bad input (DataError). This is what the rest of Rumor holds and trains on; how a set
// is decoded (idx.hpp, gzip.hpp), drawn (synthetic.hpp), split (partition.hpp), walked
// (batch_order.hpp) or read from disk (files.hpp) lives in the other files of data/.
// Pure: no I/O here or in any data/ file but files.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace rumor {

// A data problem: malformed IDX bytes, inconsistent sizes, bad shard spec. `what()` names the
// file (or source) and the reason.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Throws DataError("SOURCE: WHY").
[[noreturn]] void throw_data_error(const std::string& source, const std::string& why);

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
  // RUMOR_CHECKs that the vectors hold what `rows` says: one that does not is a bug in whoever
  // built it, not bad input.
  void check_shape() const;
};

// Train and test sets of one problem.
struct Task {
  Dataset train, test;
};

// Copies rows `idx` of `d` into contiguous batch buffers (x: n*dim; labels or targets).
void gather_batch(const Dataset& d, std::span<const std::size_t> idx, std::vector<float>& x,
                  std::vector<std::int32_t>& labels, std::vector<float>& targets);

}  // namespace rumor
