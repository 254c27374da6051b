// BatchOrder (see batch_order.hpp): each epoch's order depends only on (seed, epoch).
#include "data/batch_order.hpp"

#include <algorithm>
#include <numeric>

#include "core/rng.hpp"
#include "data/dataset.hpp"

namespace rumor {

BatchOrder::BatchOrder(std::size_t rows, std::size_t batch, std::uint64_t seed)
    : rows_(rows), batch_(batch), seed_(seed) {
  if (rows == 0) throw DataError("batch order: the shard has no rows");
  if (batch == 0) throw DataError("batch order: batch size must be at least 1");
  reshuffle();
}

void BatchOrder::reshuffle() {
  // Each epoch's order depends only on (seed, epoch), so seek() needs no replay.
  order_.resize(rows_);
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  Rng rng = Rng(seed_).fork(epoch_);
  rng.shuffle(order_);
}

std::span<const std::size_t> BatchOrder::next() {
  const std::size_t len = std::min(batch_, rows_ - pos_);
  current_.assign(order_.begin() + static_cast<std::ptrdiff_t>(pos_),
                  order_.begin() + static_cast<std::ptrdiff_t>(pos_ + len));
  pos_ += len;
  if (pos_ == rows_) {
    ++epoch_;
    pos_ = 0;
    reshuffle();
  }
  return current_;
}

std::size_t BatchOrder::batches_per_epoch() const { return (rows_ + batch_ - 1) / batch_; }

void BatchOrder::seek(std::size_t epoch, std::size_t pos) {
  if (pos >= rows_)
    throw DataError("batch order: cannot seek to position " + std::to_string(pos) +
                    " of an epoch of " + std::to_string(rows_) + " rows");
  epoch_ = epoch;
  pos_ = pos;
  current_.clear();
  reshuffle();
}

}  // namespace rumor
