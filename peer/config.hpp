// Everything a peer is told, parsed once from the command line and an optional config file
// (CLI11, peer/config.cpp) and passed down. See README.md for the flags and their defaults.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/optimizer.hpp"
#include "core/peer_loop.hpp"

namespace rumor::peer {

struct Config {
  // Data
  std::string data = "/usr/share/datasets/fashion-mnist";  // IDX directory, or "synthetic"
  std::string shard = "1/1";
  std::string partition = "iid";
  // Model and local optimizer
  std::string model = "mlp:256,128";
  std::string init = "he";  // how the model starts: he or torch (core/model.hpp InitScheme)
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::size_t batch = 64;
  // The loop and the protocol: every knob of core/knobs.hpp is a flag writing straight into
  // this (config.cpp), with core's defaults, so the daemon has no mapping of its own.
  LoopSettings loop;
  // Network and gossip (what LoopSettings does not hold)
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> join;     // HOST:PORT of any live members
  std::string checkpoint_dir;        // --checkpoint DIR (off when empty)
  double checkpoint_every_s = 30;
  bool resume = false;
  std::string verify_checkpoints;    // --verify-checkpoints DIR: check every checkpoint there, then exit
  double throttle = 1.0;             // run this many times slower
  // Trust (docs/security.md)
  std::string swarm_key_path;             // --swarm-key FILE; empty: an open swarm
  std::string tls_cert, tls_key, tls_ca;  // TLS 1.3 with mutual certificates: all three or none
  // Where the math runs
  std::string device = "cpu";
  int threads = 1;
  // Book-keeping
  std::uint64_t seed = 1;
  std::string metrics_path;
  std::string metrics_listen;  // --metrics-listen HOST:PORT: /metrics, /status.json, / (empty: off)
  std::string log_level = "info";
  std::string name;  // logger name; defaults to "peer"
  std::uint64_t init_seed = 0;      // seed of the initial parameters (0: use `seed`)
  std::string save_params_path;     // write the final parameters here (raw float32 LE)
};

// Outcome of parsing: either a Config, or an exit code with the text already printed
// (0 for --help/--version, 2 for bad usage).
struct ParseResult {
  std::optional<Config> config;
  int exit_code = 0;
};
ParseResult parse_command_line(int argc, char** argv);

}  // namespace rumor::peer
