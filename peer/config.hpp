// Everything a peer is told, parsed once from the command line and an optional config file
// (CLI11, peer/config.cpp) and passed down. See README.md for the flags and their defaults.
#pragma once
#include <cmath>
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
  // Network and gossip
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> join;     // HOST:PORT of any live members
  double join_timeout_s = 120;       // keep retrying --join this long, then exit 1 (peers start in any order)
  std::uint64_t local_steps = 1;     // H
  std::string mix_weight = "uniform";
  double exchange_timeout_s = 5.0;
  double suspect_timeout_s = 5.0;
  std::size_t min_peers = 1;         // wait for this many members (self included) before training
  double min_peers_timeout_s = 120;  // then train anyway
  double probe_interval_s = 0.5;      // SWIM probe period
  // Protocol tuning: every knob of core's GossipConfig / LoopSettings that rumor-sim sets
  // (docs/sim.md gossip.* keys) has a flag here, with the same default.
  double probe_timeout_s = NAN;       // NaN: min(0.25, probe_interval / 2)
  std::size_t max_in_flight = 2;
  bool stream_exchanges = true;
  double topk_fraction = 0.01;
  double failure_backoff_s = 1.0;
  int suspect_after = 3;
  double join_retry_s = 1.0;
  std::size_t digest_limit = 32;
  double state_timeout_s = 2.0;
  double leave_timeout_s = 1.5;
  double state_wait_s = 60;           // a joiner without the swarm's model by then trains from its own
  double leave_wait_s = 4;            // a leaving peer exits by then without a LeaveAck
  std::string checkpoint_dir;        // --checkpoint DIR (off when empty)
  double checkpoint_every_s = 30;
  bool resume = false;
  double settle_s = 3.0;             // after training: keep averaging (no training) up to this long
  double settle_max_s = 60;          // ... and up to this long while a live peer is still training
  double staleness = INFINITY;       // --staleness TAU ("inf" = fully asynchronous)
  std::string codec = "none";
  double throttle = 1.0;             // run this many times slower
  // Trust (docs/security.md)
  std::string swarm_key_path;             // --swarm-key FILE; empty: an open swarm
  std::string tls_cert, tls_key, tls_ca;  // TLS 1.3 with mutual certificates: all three or none
  bool robust = false;                    // --robust: clip or refuse far-off models
  double robust_clip = 8.0;               // clip beyond this many typical distances
  double robust_refuse = 64.0;            // refuse beyond this many (0: never)
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
