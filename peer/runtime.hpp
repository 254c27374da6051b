// The real-time world of one peer: the transport on its own I/O thread (net/), the inbox that
// hands what it hears to the compute thread, an Env with the monotonic clock, the metrics file,
// and the peer's loop (core/peer_loop.hpp). rumor-peer (peer/daemon.cpp) and the Python module
// (python/) both drive a Runtime from their one compute thread:
//
//   Runtime rt(options, settings, model, metrics, log);   // listening once constructed
//   rt.start();                                           // "start" line; join through options.join
//   for (;;) { LoopAction a = rt.next_action(deadline);   // drains and waits through every Wait
//              ...carry out Step / Evaluate; Exit: break... }
//   rt.finish(flush_s);                                   // "done" line, then the transport stops
//
// So the metrics lines ("start", "eval", "done" and every protocol event) and the way a Wait
// is carried out are written once, here, for both drivers.
//
// Threading contract: every method is called from the compute thread, except that the
// transport's I/O thread pushes into the inbox (never anything else: no protocol code, no
// Python, runs there). Every wait here is bounded.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/message.hpp"
#include "core/peer_loop.hpp"

namespace spdlog {
class logger;
}

namespace rumor::net {
class Transport;
struct TransportStats;
}  // namespace rumor::net

namespace rumor::peer {

class Inbox;
class MetricsWriter;
class MetricsEndpoint;

struct RuntimeOptions {
  std::string listen = "127.0.0.1:0";   // HOST:PORT; port 0 picks a free one
  std::vector<std::string> join;        // HOST:PORT of any live members; none: a new swarm
  std::string fingerprint;              // the model's; peers must match (net/handshake)
  std::size_t param_count = 0;          // bounds the payloads we accept
  Bytes swarm_key;                      // net::load_swarm_key's secret; empty: an open swarm
  std::string tls_cert, tls_key, tls_ca;
  std::uint64_t seed = 1;               // the protocol's random stream (mixed with our id)
  std::uint64_t incarnation = 0;        // 0: the wall-clock milliseconds (a restart outranks its earlier life)
  std::string device = "cpu";           // for the "start" line: where the math runs ("python": a torch model)
  // HOST:PORT of the HTTP endpoint (/metrics, /status.json, /: peer/metrics_endpoint.hpp);
  // empty: none. `metrics_flag` names it in errors ("--metrics-listen", "metrics_listen").
  std::string metrics_listen;
  const char* metrics_flag = "--metrics-listen";
  std::string name;                     // the peer's name, a label of its series (empty: none)
};

// Reads a swarm key file (net::load_swarm_key: std::invalid_argument naming the file) and
// warns when other users of the machine can read it. Empty path: an open swarm (no key).
Bytes read_swarm_key(const std::string& path, spdlog::logger& log);

class Runtime {
 public:
  // Starts the transport (listening when this returns; a bad address or TLS file throws
  // std::invalid_argument) and the HTTP endpoint if asked (a bad address or a port in use:
  // std::invalid_argument naming options.metrics_flag), and builds the loop around `model`.
  // `metrics` must outlive it.
  Runtime(const RuntimeOptions& options, const LoopSettings& settings, LoopModel& model, MetricsWriter& metrics,
          std::shared_ptr<spdlog::logger> log);
  ~Runtime();  // stops the transport (closes its connections)
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const PeerId& id() const { return id_; }
  // Writes the "start" metrics line, logs the address, and joins through options.join plus
  // `more` (e.g. a resumed peer's saved view).
  void start(const std::vector<PeerId>& more = {});
  // Drives the loop through its Waits (draining inputs, waking at each `until`) and returns
  // the first action that is not a Wait, or a Wait once env time `deadline` has passed. A set
  // *stop (SIGTERM, SIGINT) asks the loop for a graceful leave first.
  LoopAction next_action(double deadline, const std::atomic<bool>* stop = nullptr);
  // The end of the peer's life: the "done" metrics line and log line (if it trained), then
  // close(flush_s). Call once, after next_action() said Exit (or the driver gave up).
  void finish(double flush_s = kFlushSeconds);
  // What finish() gives queued frames by default, until their peers acknowledge them
  // (Transport::flush): a float32 model of the quickstart's MLP takes 0.75 s over 10 Mbit. Only
  // a peer that does not read holds an exit this long.
  static constexpr double kFlushSeconds = 3.0;
  // While it flushes, a peer that left hands what arrives to Gossip at least this often.
  static constexpr double kCloseSlice = 0.05;
  // Hands everything queued to Gossip. Returns true if anything was handled; then whatever
  // mixed into or replaced the parameters did so, and `on_params_written` was called first.
  bool drain();
  // Blocks until env time `until`, something arrives, or *stop turns true (looked at every
  // 20 ms), then drains. Returns at once if `until` has passed.
  void wait(double until, const std::atomic<bool>* stop = nullptr);
  // Waits up to `seconds` (same wake-ups), draining as things arrive, until env time has
  // passed now + seconds: a throttled step's stretch.
  void sleep_for(double seconds, const std::atomic<bool>* stop = nullptr);

  // The loop's step_done, its CPU counted as the protocol's (Env::cpu(): an exchange it starts
  // snapshots, encodes and hashes the model). The daemon and the Python module call this.
  void step_done(double loss, double seconds, std::uint64_t samples);

  PeerLoop& loop() { return *loop_; }
  const PeerLoop& loop() const { return *loop_; }
  Gossip& gossip() { return loop_->gossip(); }
  Env& env();
  double now() const;
  net::TransportStats transport_stats() const;
  std::uint64_t transport_rejected() const { return transport_rejected_; }  // connections refused for bad input
  // Why the transport last refused a connection (e.g. "model fingerprint mismatch: ours '..',
  // theirs '..'"), empty if it never did: the Python module's join() names it.
  const std::string& last_rejection() const { return last_rejection_; }
  // One evaluation, reported the same way by rumor-peer and the Python module: the log line
  // and the "eval" metrics line (docs/metrics.md); then a new samples/s interval begins.
  // `note` is appended to the log line. The last one goes into the "done" line.
  void report_eval(std::uint64_t step, double epoch, double loss, double test_acc, const std::string& note = "");
  double last_test_acc() const { return last_acc_; }
  double last_loss() const { return last_loss_; }
  // Lets queued frames go out (up to `flush_s`), then stops the transport and the HTTP
  // endpoint. Idempotent.
  void close(double flush_s = 1.0);
  // The HTTP endpoint's address as bound ("host:port"), empty without one.
  std::string metrics_address() const;
  // Hands the loop's current values to the HTTP endpoint when due (a few atomic updates,
  // about every 0.25 s; a no-op without an endpoint). next_action() calls it; a driver that
  // stays away from next_action for long (a step) may too. `force`: now, whatever is due.
  void publish(bool force = false);

  // Called by drain() before Gossip handles anything (a device Trainer uploads its host mirror
  // before its next use: Trainer::params_written).
  std::function<void()> on_params_written;

 private:
  class RealEnv;
  std::shared_ptr<spdlog::logger> log_;
  MetricsWriter& metrics_;
  std::unique_ptr<Inbox> inbox_;
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<MetricsEndpoint> endpoint_;  // null without --metrics-listen
  class ProtocolCpu;
  std::unique_ptr<RealEnv> env_;
  std::unique_ptr<PeerLoop> loop_;
  PeerId id_;
  std::vector<PeerId> seeds_;
  std::string device_;
  std::uint64_t transport_rejected_ = 0;
  std::string last_rejection_;
  double last_acc_ = NAN, last_loss_ = NAN;
  std::uint64_t slowest_ = 0, fastest_ = 0;  // publish(): as of the last pass over the view
  static constexpr std::size_t kMaxMemberRows = 1000;  // members listed in /status.json
  bool stop_logged_ = false;
  bool was_settling_ = false;          // the loop was in its Settling phase at the last next()
  bool closed_ = false;
};

// The XXH3-64 hash of a string, to derive a per-peer random stream from the seed and its id.
std::uint64_t id_hash(const std::string& s);

}  // namespace rumor::peer
