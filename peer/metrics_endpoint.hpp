// The live face of one peer over HTTP (`rumor-peer --metrics-listen HOST:PORT`, rumor.Peer's
// `metrics_listen=`): `/metrics` in the Prometheus text format (prometheus-cpp's pull Exposer),
// `/status.json` (what this peer knows of the swarm, with short histories) and `/` (the live
// swarm page, one self-contained HTML file: peer/swarm_page.html). docs/metrics.md lists every
// series beside the JSONL field it corresponds to.
//
// Threading contract: the compute thread (the one driving the peer's loop; in the Python module,
// whichever thread holds the peer's lock, as for the rest of the Runtime) calls every method;
// the HTTP server answers from its own threads (civetweb's, inside the Exposer) and never
// touches the loop, Gossip or the model. What the compute thread publishes costs it a few
// atomic updates per call (prometheus-cpp's counters and gauges) and, about once a second while
// somebody reads /status.json, one copy of a small snapshot handed over by pointer swap: it
// never waits on a scrape.
//
// prometheus-cpp and civetweb stay in metrics_endpoint.cpp (pimpl): this header is cheap.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace rumor::peer {

// One member as this peer's view has it (status.json, the page's member table).
struct MemberRow {
  std::string id;
  const char* state = "alive";  // member_state_name()
  std::uint64_t clock = 0;
};

// What the compute thread reads off the loop at a publish point: totals (the endpoint turns
// them into counter increments) and current values (gauges).
struct PeerSample {
  double t = 0;  // env time (seconds since the peer started)
  const char* phase = "idle";  // loop_phase_name()
  std::uint64_t clock = 0;     // local steps done
  std::uint64_t samples = 0;
  std::uint64_t slowest = 0;   // smallest clock of the other alive members (ours when none)
  std::uint64_t fastest = 0;   // largest clock of the live members, ourselves included
  std::uint64_t alive = 1;     // alive members in view, ourselves included
  std::uint64_t suspect = 0;
  std::uint64_t bytes_sent = 0, bytes_recv = 0;
  std::uint64_t waits = 0;
  double wait_seconds = 0;
  double train_seconds = 0;    // seconds of step time so far (samples/s over a window)
  std::uint64_t robust_clipped = 0, robust_refused = 0;
  std::uint64_t stale = 0;
  double distance = 0;         // the last exchange's relative model distance
  double training_started = -1;  // env time training began, -1 before
  // Filled (ourselves first; at most 1000 rows of the view's members_total, tombstones
  // included) only when members_due() said so.
  std::vector<MemberRow> members;
  std::size_t members_total = 0;
};

class MetricsEndpoint {
 public:
  // Listens on `listen` (HOST:PORT; HOST a name or an address, resolved once; port 0 picks a
  // free one). `peer` (this peer's id, its gossip address) and `name` (empty: none) label every
  // series. A bad address or a port in use throws std::invalid_argument naming `flag` and the
  // reason (exit code 2 in rumor-peer, ValueError in Python).
  MetricsEndpoint(const std::string& listen, const char* flag, const std::string& peer, const std::string& name,
                  std::shared_ptr<spdlog::logger> log);
  ~MetricsEndpoint();  // stops the HTTP threads before anything they read goes away
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "host:port" as bound (the real port when 0 was asked for).
  const std::string& address() const;

  // Events, counted as they happen (so a counter equals the JSONL lines written so far).
  // `role` "initiator" or "responder"; `rtt_s` the initiator's round trip (the duration
  // histogram takes initiators only); `payload_bytes` the encoded snapshot this peer sent.
  void exchange_done(bool initiator, double rtt_s, double payload_bytes);
  void exchange_failed();
  void exchange_declined();
  void rejected();
  void state_transfer(bool received);
  void handover();
  // An evaluation: the gauges and the page's accuracy/loss history.
  void eval(double t, std::uint64_t step, double test_acc, double loss);

  // Periodic values from the loop. `publish_due(t)`: true when the next publish is due (about
  // every kPublishInterval); the caller then builds a PeerSample and calls publish(), with
  // the members (ourselves included) when members_due(t) says so (about once a second: the
  // page's histories, and /status.json while somebody reads it).
  bool publish_due(double t) const { return t >= next_publish_; }
  bool members_due(double t) const;
  void publish(const PeerSample& s);
  // Wall-clock seconds since 1970 at env time 0 (status.json gives times on one axis for
  // several peers: unix = unix0 + t).
  void set_unix_origin(double unix0);

  static constexpr double kPublishInterval = 0.25;  // gauges at most this stale
  static constexpr double kHistoryInterval = 1.0;   // one point of the page's histories per second
  static constexpr double kStatusInterest = 10.0;
  static constexpr std::size_t kMaxHistory = 600;   // points per history; older ones thinned by half
  static constexpr std::size_t kMaxMemberCurves = 32;  // members whose clock curve is kept

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
  double next_publish_ = 0;
};

}  // namespace rumor::peer
