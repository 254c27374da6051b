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

// rumor-peer's defaults where they differ from core's: 5 epochs; --join retried for 120 s,
// not forever; the probe timeout derived from --probe-interval (LoopSettings::resolved()).
inline LoopSettings daemon_loop() {
  LoopSettings ls;
  ls.epochs = 5;
  ls.gossip.join_timeout_s = 120;
  ls.gossip.probe_timeout_s = NAN;
  return ls;
}

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
  // The loop and the protocol: every knob of core's LoopSettings / GossipConfig that rumor-sim
  // sets (docs/sim.md gossip.* keys) has a flag bound straight to its field here (config.cpp),
  // so the daemon has no mapping of its own. Defaults are core's, except where daemon_loop()
  // says otherwise. The stop rules: the first that is set and reached (default 5 epochs).
  LoopSettings loop = daemon_loop();
  // Network and gossip (what LoopSettings does not hold)
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> join;     // HOST:PORT of any live members
  std::string mix_weight = "uniform";
  std::string codec = "none";
  std::string checkpoint_dir;        // --checkpoint DIR (off when empty)
  double checkpoint_every_s = 30;
  bool resume = false;
  double throttle = 1.0;             // run this many times slower
  // Trust (docs/security.md)
  std::string swarm_key_path;             // --swarm-key FILE; empty: an open swarm
  std::string tls_cert, tls_key, tls_ca;  // TLS 1.3 with mutual certificates: all three or none
  // --robust, --robust-clip, --robust-refuse: loop.gossip.robust
  // Where the math runs
  std::string device = "cpu";
  int threads = 1;
  // Book-keeping
  std::uint64_t seed = 1;
  std::string metrics_path;
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

// "HOST:PORT" (IPv4, [IPv6] or a name) -> host and port; throws std::invalid_argument naming
// `flag` and the accepted form. `allow_zero` accepts port 0 (pick a free one).
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const;
};
HostPort parse_host_port(const std::string& s, const char* flag, bool allow_zero);

}  // namespace rumor::peer
