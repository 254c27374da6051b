// A queue of timed events, ordered by (time, sequence): the one event loop's heap, shared by
// the simulator (sim/event_queue.hpp), its parameter-server baselines and core's unit-test
// fixture (tests/core/cluster.hpp).
//
// Tie rule (docs/sim.md): events with equal time run in the order they were pushed (`seq` is a
// counter that only grows), so a run is a pure function of its inputs. `E` is any plain struct
// with a `double t` and a `std::uint64_t seq`; push() sets `seq`.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/check.hpp"

namespace rumor {

template <class E>
class TimedQueue {
 public:
  void push(E e) {
    e.seq = next_seq_++;
    // Sift up: move parents down into the hole until e's place is found.
    std::size_t i = heap_.size();
    heap_.emplace_back();
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[i] = std::move(heap_[parent]);
      i = parent;
    }
    heap_[i] = std::move(e);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const E& top() const { return heap_.front(); }
  E pop() {
    RUMOR_CHECK(!heap_.empty());
    E out = std::move(heap_.front());
    E last = std::move(heap_.back());
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n > 0) {
      // Sift down the last event from the root: each level moves the earliest child up.
      std::size_t i = 0;
      for (;;) {
        const std::size_t first = kArity * i + 1;
        if (first >= n) break;
        std::size_t best = first;
        const std::size_t end = std::min(first + kArity, n);
        for (std::size_t c = first + 1; c < end; ++c)
          if (before(heap_[c], heap_[best])) best = c;
        if (!before(heap_[best], last)) break;
        heap_[i] = std::move(heap_[best]);
        i = best;
      }
      heap_[i] = std::move(last);
    }
    return out;
  }
  std::uint64_t scheduled() const { return next_seq_; }  // pushes so far

 private:
  // A 4-ary heap: half the levels of a binary one, and a node's children side by side in
  // memory, so a pop touches fewer cache lines of a heap of millions of pending events (the
  // simulator's timers at 100,000 peers). (time, seq) is a strict order, so any correct heap
  // pops the same sequence.
  static constexpr std::size_t kArity = 4;
  static bool before(const E& a, const E& b) { return a.t != b.t ? a.t < b.t : a.seq < b.seq; }
  std::vector<E> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace rumor
