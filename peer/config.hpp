// Everything a peer is told, parsed once from the command line and an optional config file
// (CLI11, peer/config.cpp) and passed down. See README.md for the flags and their defaults.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/optimizer.hpp"

namespace rumor::peer {

struct Config {
  // Data
  std::string data = "/usr/share/datasets/fashion-mnist";  // IDX directory, or "synthetic"
  std::string shard = "1/1";
  std::string partition = "iid";
  // Model and local optimizer
  std::string model = "mlp:256,128";
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::size_t batch = 64;
  // When to stop: the first of these that is set and reached (default 5 epochs).
  double epochs = 5;
  std::uint64_t steps = 0;      // 0 = not set
  double duration_s = 0;        // 0 = not set
  std::uint64_t eval_every = 0; // 0 = once per epoch
  // Where the math runs
  std::string device = "cpu";
  int threads = 1;
  // Book-keeping
  std::uint64_t seed = 1;
  std::string metrics_path;
  std::string log_level = "info";
  std::string name;  // logger name; defaults to the peer id
};

// Outcome of parsing: either a Config, or an exit code with the text already printed
// (0 for --help/--version, 2 for bad usage).
struct ParseResult {
  std::optional<Config> config;
  int exit_code = 0;
};
ParseResult parse_command_line(int argc, char** argv);

}  // namespace rumor::peer
