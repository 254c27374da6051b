// The order a peer walks its shard in: mini-batches, reshuffled at the start of every epoch from
// a seed, and seekable to a saved (epoch, position) for checkpoints and state transfer. Not the
// copying of a batch's rows (gather_batch, dataset.hpp) nor the choice of rows (partition.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rumor {

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

}  // namespace rumor
