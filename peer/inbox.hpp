// The hand-off from the I/O thread to the compute thread: transport callbacks and timers push
// here; the compute thread drains it at every step boundary (and blocks on it while it has
// nothing else to do), so the gossip protocol only ever runs on the compute thread.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "core/message.hpp"

namespace rumor::peer {

struct InboxItem {
  enum class Kind { Message, SendFailed, Rejected, Timer } kind;
  PeerId peer;
  Message msg;
  std::string reason;
  std::uint64_t timer = 0;
};

class Inbox {
 public:
  void push(InboxItem item) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(item));
    }
    cv_.notify_one();
  }
  // Takes everything queued now (does not wait).
  std::deque<InboxItem> take_all() {
    std::lock_guard<std::mutex> lk(mu_);
    std::deque<InboxItem> out;
    out.swap(q_);
    return out;
  }
  // Waits up to `timeout` for something to arrive; returns true if the queue is non-empty.
  bool wait_for(std::chrono::duration<double> timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return !q_.empty(); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<InboxItem> q_;
};

}  // namespace rumor::peer
