// The peer daemon: loads its shard, trains, evaluates, reports. One instance per process.
//
// Threads: the compute thread (the caller of run()) trains and runs the protocol; signals only
// set a flag that the loop reads at each step boundary.
#pragma once
#include <atomic>
#include <memory>

#include "peer/config.hpp"

namespace spdlog {
class logger;
}

namespace rumor::peer {

class Daemon {
 public:
  Daemon(Config cfg, std::shared_ptr<spdlog::logger> log);
  ~Daemon();
  // Trains until the stop condition or request_stop(); returns the process exit code.
  // Throws DataError / std::invalid_argument for bad input (exit 2 in main).
  int run();
  // Async-signal-safe: sets a flag read at the next step boundary.
  void request_stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  Config cfg_;
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<bool> stop_{false};
};

}  // namespace rumor::peer
