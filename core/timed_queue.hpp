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
#include <vector>

#include "core/check.hpp"

namespace rumor {

template <class E>
class TimedQueue {
 public:
  void push(E e) {
    e.seq = next_seq_++;
    heap_.push_back(std::move(e));
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const E& top() const { return heap_.front(); }
  E pop() {
    RUMOR_CHECK(!heap_.empty());
    std::pop_heap(heap_.begin(), heap_.end(), later);
    E e = std::move(heap_.back());
    heap_.pop_back();
    return e;
  }
  std::uint64_t scheduled() const { return next_seq_; }  // pushes so far

 private:
  static bool later(const E& a, const E& b) { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
  std::vector<E> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace rumor
