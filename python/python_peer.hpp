// A Rumor peer driven by a Python training loop: the third driver of the one peer loop
// (core/peer_loop.hpp). It owns the flat float32 parameter buffer that Gossip mixes into and
// that Python reads and writes without a copy, and runs the real-time runtime of the daemon
// (peer/runtime.hpp: transport on its I/O thread, inbox, real-time Env, metrics, PeerLoop).
//
// The Python side (python/rumor/torch.py) copies the live torch parameters into the buffer
// after each local step (end_step) and adds what was mixed into it since then to the live
// parameters at the next (begin_step returns that change: the overlap, or delta, rule). To
// compute the change without knowing what Gossip touched, the node keeps a shadow of the
// buffer as last copied (taken only when inputs are about to be handed to Gossip) and returns
// buffer - shadow, or nothing when they are equal.
//
// Threading: every method runs on the caller's thread (the Python thread, with the GIL released
// by the bindings around the blocking ones); the runtime's I/O thread only queues into its inbox
// and never calls back here, let alone into Python. Every wait is bounded by a timeout.
// Fork: a node belongs to the process that made it; in a forked child every call throws and the
// destructor leaves the (absent) threads alone.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/peer_loop.hpp"

namespace spdlog {
class logger;
}
namespace rumor::peer {
class Runtime;
class MetricsWriter;
}

namespace rumor::python {

struct NodeOptions {
  std::string fingerprint;
  std::size_t size = 0;
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> join;
  std::string swarm_key_path;
  std::string metrics_path;
  std::string metrics_listen;  // HOST:PORT of /metrics, /status.json and / (empty: none)
  std::int64_t seed = -1;  // -1: from the listen address
  std::string log_level = "warning";
  std::string name;
  // The loop's knobs by name (core/knobs.hpp: the same table as rumor-peer's flags), as text;
  // the rest keep core's defaults. An unknown name or a bad value: std::invalid_argument.
  std::vector<std::pair<std::string, std::string>> knobs;
};

// A keyword that is not one of the loop's knobs a Python peer has (TypeError in Python).
struct UnknownKnob : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// Sets knob `name` (core/knobs.hpp) of `s` from its text: UnknownKnob, or std::invalid_argument
// naming the knob and what it accepts.
void apply_knob(LoopSettings& s, const std::string& name, const std::string& value);

// What join() found: "ready" (step: the swarm's step, 0 when none was taken), "mismatch" (the
// members train another model; reason: the transport's line with both fingerprints) or
// "timeout" (reason: the last problem seen, if any).
struct JoinResult {
  std::string status;
  std::uint64_t step = 0;
  std::string reason;
};

// A wait that did not end within its timeout (the staleness bound held this peer back).
struct WaitTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A step reported a non-finite loss: the loop stopped (as rumor-peer exits 1).
struct Diverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Used from a forked child.
struct ForkedChild : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Node final : public LoopModel {
 public:
  // Checks the options (std::invalid_argument naming the bad one), binds the listen address
  // (std::runtime_error naming it), starts the I/O thread and joins through `join`.
  explicit Node(NodeOptions o);
  ~Node() override;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // LoopModel
  std::span<float> params() override { return flat_; }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t samples() const override { return samples_; }
  double epochs_done() const override { return 0; }
  void adopt_step(std::uint64_t step) override { steps_ = step; }

  float* data() { return flat_.data(); }
  std::size_t size() const { return flat_.size(); }
  std::string address() const;
  std::string metrics_address() const;  // "host:port" of the HTTP endpoint, empty without one
  const std::string& fingerprint() const { return o_.fingerprint; }

  // Blocks until the loop is ready for the first step (joined, and a joiner holds the swarm's
  // model), at most timeout_s.
  JoinResult join(double timeout_s);
  // After join(): the Python side has copied the model out of the buffer, so until the next
  // begin_step() the responder may answer for us (a joiner's state transfer, exchanges: the
  // mixes land in the buffer and reach the live parameters at begin_step(), as between steps).
  // Without it a member that joined and then loaded its data for a while answered nobody, and
  // a joiner through it timed out. std::logic_error unless join() was the last entry point.
  void model_copied();
  // Before a local update: hands queued inputs to Gossip (the mid-step drain) and, if the loop
  // is not ready to step (still joining, or held back by staleness), waits for it up to
  // wait_timeout_s (WaitTimeout). True when the buffer changed since the last copy: the change
  // is in delta().
  bool begin_step(double wait_timeout_s);
  // After the Python side copied the live parameters into the buffer: one step done (an
  // exchange starts when one is due), then the staleness wait for the next step, bounded.
  // True when something was mixed in during that wait (delta()).
  bool end_step(double loss, double seconds, std::uint64_t samples, double wait_timeout_s);
  // A pause in training (PeerLoop::pause): averages with the swarm without stepping, as a
  // settling rumor-peer does, for `seconds`, or up to max_seconds while a live peer is still
  // behind our clock (still training); outside training it only answers (exchanges, state
  // requests, probes) for `seconds`. Negative: the settle / settle_max knobs. True when the
  // buffer changed meanwhile (delta()).
  bool serve(double seconds, double max_seconds);
  std::span<const float> delta() const { return delta_; }
  // Extra state (core/gossip.hpp): a blob a joiner gets with our model, never averaged (the
  // Python side publishes its optimizer state here); empty: none. received_extra_state(): what
  // our own state transfer brought beside the model (empty if nothing).
  void set_extra_state(const std::uint8_t* data, std::size_t size);
  std::string received_extra_state();
  // One "eval" metrics line (what the Python loop measured, with the peer's counters), so that
  // examples/report.py summarises Python peers like C++ ones; the last one goes into "done".
  void report(double test_acc, double loss, double epoch);
  // This peer will not train again: its digest says so (MemberDigest::done), so trainers pick
  // others first and nobody's staleness bound waits for it (close() before its final serve()).
  void training_done();
  std::map<std::string, double> stats();
  // The factor for the learning rate of the step about to be taken (PeerLoop::lr_scale: the
  // peers training now over the most seen; 1 with lr_follows_peers off). Once per step.
  double lr_scale();
  // Graceful leave (announce, hand the model over), then stop the network; returns within
  // about timeout_s. Idempotent.
  void close(double timeout_s);
  bool closed() const { return closed_; }

 private:
  void check_process() const;
  // Drives the loop (Runtime::next_action) until it says Step. False on timeout, on exit, or as
  // soon as give_up() says so.
  bool until_step(double timeout_s, const std::function<bool()>& give_up = {});
  // delta_ = flat_ - shadow_, shadow_ = flat_; true if any coordinate changed.
  bool take_delta();
  // until_step() failed: Diverged, left, or WaitTimeout with what the loop is waiting for.
  [[noreturn]] void throw_not_ready(const char* what, double timeout_s);

  // Between steps (after end_step(), serve() or report() returned, until the next
  // begin_step()) the user's loop may be busy for long (an evaluation, a checkpoint): a
  // background thread then hands queued inputs to Gossip, so exchanges, probes and state
  // requests are answered instead of timing out. It never runs Python code and never calls
  // next(): it only drains, under mu_, which every entry point holds too. The buffer is the
  // user's from begin_step() (or join()) until end_step(); the responder waits meanwhile.
  void respond();
  static constexpr double kRespondAfter = 0.02;  // the user's loop away this long: answer for it
  static constexpr double kRespondPoll = 0.005;  // how often the responder looks
  // The scope of an entry point: holds mu_; on the way out says who owns the buffer now.
  struct Entry;

  std::mutex mu_;
  std::condition_variable wake_;
  std::unique_ptr<std::thread> responder_;
  bool stop_responder_ = false;
  bool user_owns_ = true;  // the user's loop may write the buffer: the responder stays off
  bool after_join_ = false;  // join() was the last entry point that touched the buffer
  double returned_at_ = 0; // env time the last entry point returned
  std::uint64_t background_drains_ = 0;  // drains by the responder that handed inputs over

  NodeOptions o_;
  pid_t pid_;
  std::shared_ptr<spdlog::logger> log_;
  std::vector<float> flat_, shadow_, delta_;
  // The shadow holds the buffer as the live parameters last saw it (false after each copy-in,
  // until inputs are next handed to Gossip); inputs were handed over since the last delta.
  bool shadow_current_ = false;
  bool maybe_written_ = false;
  std::uint64_t steps_ = 0, samples_ = 0;
  bool closed_ = false;
  std::unique_ptr<peer::MetricsWriter> metrics_;  // outlives rt_, which writes into it
  std::unique_ptr<peer::Runtime> rt_;
};

}  // namespace rumor::python
