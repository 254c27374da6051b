// The Python module's peer (python_peer.hpp): the one peer loop driven by the user's torch loop.
#include "python/python_peer.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "core/knobs.hpp"
#include "net/transport.hpp"
#include "peer/metrics.hpp"
#include "peer/runtime.hpp"

namespace rumor::python {

namespace {

std::shared_ptr<spdlog::logger> make_logger(const std::string& name, const std::string& level) {
  static std::atomic<int> counter{0};
  // A fresh, unregistered logger per node: many nodes in one process log apart.
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>(name.empty() ? "rumor-py-" + std::to_string(++counter) : name, sink);
  const auto lvl = spdlog::level::from_str(level == "warning" ? "warn" : level);
  log->set_level(lvl);
  log->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
  return log;
}


}  // namespace

void apply_knob(LoopSettings& s, const std::string& name, const std::string& value) {
  const Knob* k = find_knob(name);
  if (!k || !(k->scope & Knob::kPython)) throw UnknownKnob("unknown setting '" + name + "'");
  try {
    set_knob(*k, s, value);
  } catch (const KnobError& e) {
    throw std::invalid_argument(name + ": " + e.what());
  }
}

namespace {

// The loop's settings of a Python peer: the user's knobs over core's defaults, and what this
// driver decides itself.
LoopSettings python_loop_settings(const NodeOptions& o) {
  LoopSettings ls;
  for (const auto& [name, value] : o.knobs) apply_knob(ls, name, value);
  if (const std::string why = knob_conflicts(ls); !why.empty()) throw std::invalid_argument(why);
  ls.evaluate = false;                       // the user's loop evaluates (report())
  ls.epochs = 0;                             // ... and decides when training ends (close())
  ls.gossip.join_timeout_s = INFINITY;       // join(timeout) bounds the wait for a member
  ls.state_wait_s = 1e9;                     // ... and for the swarm's model
  // Peers starting a swarm together share their initialisation (as rumor-peer --min-peers).
  ls.gossip.fetch_state = ls.min_peers <= 1;
  ls.gossip.fetch_extra_state = true;        // the optimizer state, when the source publishes one
  return ls.resolved();
}

}  // namespace

Node::Node(NodeOptions o) : o_(std::move(o)), pid_(::getpid()) {
  if (o_.size == 0) throw std::invalid_argument("a model needs at least one parameter");
  const LoopSettings ls = python_loop_settings(o_);  // std::invalid_argument naming the bad knob
  log_ = make_logger(o_.name, o_.log_level);
  flat_.assign(o_.size, 0.0f);
  shadow_.assign(o_.size, 0.0f);
  delta_.assign(o_.size, 0.0f);

  peer::RuntimeOptions ro;
  ro.listen = o_.listen;
  ro.join = o_.join;
  ro.fingerprint = o_.fingerprint;
  ro.param_count = o_.size;
  ro.swarm_key = peer::read_swarm_key(o_.swarm_key_path, *log_);
  ro.device = "python";
  ro.metrics_listen = o_.metrics_listen;
  ro.metrics_flag = "metrics_listen";
  ro.name = o_.name;
  if (o_.seed >= 0) ro.seed = static_cast<std::uint64_t>(o_.seed);
  metrics_ = std::make_unique<peer::MetricsWriter>(o_.metrics_path);  // std::runtime_error naming the path
  rt_ = std::make_unique<peer::Runtime>(ro, ls, *this, *metrics_, log_);
  // Gossip is about to handle inputs: keep the buffer as the live parameters last saw it.
  rt_->on_params_written = [this] {
    if (!shadow_current_) {
      std::memcpy(shadow_.data(), flat_.data(), flat_.size() * sizeof(float));
      shadow_current_ = true;
    }
    maybe_written_ = true;
  };
  log_->info("model {} ({} parameters)", o_.fingerprint, o_.size);
  rt_->start();
  returned_at_ = rt_->now();
  responder_ = std::make_unique<std::thread>([this] { respond(); });
}

// Every entry point from Python: holds mu_ (the responder waits), and on the way out records
// whether the user's loop owns the buffer now and when it left.
struct Node::Entry {
  Node& n;
  std::unique_lock<std::mutex> lk;
  bool user_owns_after;
  bool join_ready = false;  // a join() that succeeded: model_copied() may follow
  Entry(Node& node, bool owns_after) : n(node), lk(node.mu_), user_owns_after(owns_after) {}
  ~Entry() {
    n.user_owns_ = user_owns_after;
    n.after_join_ = join_ready;
    if (n.rt_) n.returned_at_ = n.rt_->now();
  }
};

void Node::respond() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    wake_.wait_for(lk, std::chrono::duration<double>(kRespondPoll), [this] { return stop_responder_; });
    if (stop_responder_) return;
    if (user_owns_ || closed_ || rt_->now() - returned_at_ < kRespondAfter) continue;
    if (rt_->drain()) ++background_drains_;
  }
}

Node::~Node() {
  if (::getpid() != pid_) {
    // A forked child: the runtime's threads and sockets are the parent's. Leak it.
    (void)responder_.release();
    (void)rt_.release();
    (void)metrics_.release();
    return;
  }
  try {
    close(1.0);
  } catch (...) {
  }
}

void Node::check_process() const {
  if (::getpid() != pid_)
    throw ForkedChild("this peer was created in process " + std::to_string(pid_) +
                      " and cannot be used in a forked child: create a new peer there");
  if (closed_) throw std::runtime_error("the peer is closed");
}

std::string Node::address() const { return rt_->id(); }
std::string Node::metrics_address() const { return rt_->metrics_address(); }

void Node::set_extra_state(const std::uint8_t* data, std::size_t size) {
  check_process();
  auto b = size ? std::make_shared<const Bytes>(data, data + size) : nullptr;
  std::lock_guard<std::mutex> lk(mu_);  // the responder may be answering a state request
  rt_->gossip().set_extra_state(std::move(b));
}

std::string Node::received_extra_state() {
  check_process();
  std::lock_guard<std::mutex> lk(mu_);
  const auto& b = rt_->gossip().received_extra_state();
  return b ? std::string(b->begin(), b->end()) : std::string();
}


bool Node::take_delta() {
  if (!maybe_written_) return false;
  maybe_written_ = false;
  bool any = false;
  const float* f = flat_.data();
  float* s = shadow_.data();
  float* d = delta_.data();
  for (std::size_t i = 0, n = flat_.size(); i < n; ++i) {
    d[i] = f[i] - s[i];
    any |= d[i] != 0.0f;
    s[i] = f[i];
  }
  return any;
}

bool Node::until_step(double timeout_s, const std::function<bool()>& give_up) {
  const double deadline = rt_->now() + timeout_s;
  for (;;) {
    // give_up() is looked at every 50 ms at least.
    const LoopAction a = rt_->next_action(give_up ? std::min(deadline, rt_->now() + 0.05) : deadline);
    switch (a.kind) {
      case LoopAction::Kind::Step: return true;
      case LoopAction::Kind::Evaluate: continue;  // evaluation is off; nothing to do
      case LoopAction::Kind::Exit: return false;
      case LoopAction::Kind::Wait: break;
    }
    if (rt_->now() >= deadline || (give_up && give_up())) return false;
  }
}

JoinResult Node::join(double timeout_s) {
  check_process();
  Entry entry(*this, true);  // the Python side copies the buffer out next
  JoinResult r;
  // A seed that trains another model refuses us at the handshake: no point waiting further
  // while no member has let us in.
  auto refused = [this] {
    return !rt_->loop().gossip().joined() &&
           rt_->last_rejection().find("fingerprint mismatch") != std::string::npos;
  };
  const bool ready = until_step(timeout_s, refused);
  entry.join_ready = ready;
  if (ready) {
    r.status = "ready";
    r.step = rt_->loop().gossip().adopted_step().value_or(0);
  } else {
    const std::string why = rt_->last_rejection();
    r.status = why.find("fingerprint mismatch") != std::string::npos ? "mismatch" : "timeout";
    r.reason = why;
  }
  // The Python side now copies the buffer into the live parameters: this is the reference.
  std::memcpy(shadow_.data(), flat_.data(), flat_.size() * sizeof(float));
  shadow_current_ = true;
  maybe_written_ = false;
  return r;
}

void Node::model_copied() {
  check_process();
  std::lock_guard<std::mutex> lk(mu_);
  if (!after_join_)
    throw std::logic_error("model_copied() says that the model a successful join() brought was copied out of the "
                           "buffer: call it right after join(), before the first begin_step()");
  after_join_ = false;
  user_owns_ = false;  // the responder answers for us until begin_step()
  returned_at_ = rt_->now();
}

void Node::throw_not_ready(const char* what, double timeout_s) {
  const PeerLoop& loop = rt_->loop();
  if (loop.phase() == LoopPhase::Exited || loop.phase() == LoopPhase::Final) {
    if (loop.stats().diverged)
      throw Diverged("training diverged (a step reported a non-finite loss): this peer stopped exchanging; "
                     "close it, lower the learning rate and start again");
    throw std::runtime_error("the peer has left the swarm");
  }
  throw WaitTimeout(std::string(what) + " within " + std::to_string(timeout_s) + " s (phase " +
                    loop_phase_name(loop.phase()) + ", clock " + std::to_string(steps_) + ", slowest live peer at " +
                    std::to_string(loop.gossip().slowest_clock()) + ", " +
                    std::to_string(loop.gossip().view().live_count() + 1) + " peers in view)");
}

bool Node::begin_step(double wait_timeout_s) {
  check_process();
  Entry entry(*this, true);  // the local update and the copy-in follow
  if (!until_step(wait_timeout_s)) throw_not_ready("the peer could not start a step", wait_timeout_s);
  return take_delta();
}

bool Node::end_step(double loss, double seconds, std::uint64_t samples, double wait_timeout_s) {
  check_process();
  Entry entry(*this, false);  // between steps: the responder answers for us
  shadow_current_ = false;  // the buffer now holds the live parameters
  ++steps_;
  samples_ += samples;
  rt_->step_done(loss, seconds, samples);
  if (!until_step(wait_timeout_s)) throw_not_ready("the staleness bound held this peer back", wait_timeout_s);
  return take_delta();
}

bool Node::serve(double seconds, double max_seconds) {
  check_process();
  Entry entry(*this, false);
  PeerLoop& loop = rt_->loop();
  if (seconds < 0) seconds = loop.settings().settle_s;
  if (max_seconds < 0) max_seconds = loop.settings().settle_max_s;
  // The loop's pause ends itself (its deadline rule: at most max(seconds, max_seconds), plus
  // `seconds` once the last member behind caught up); ours only bounds a pause that never
  // began (outside training: `seconds`) or a loop that keeps waiting.
  loop.pause(seconds, max_seconds);
  const bool training = loop.phase() == LoopPhase::Training;
  for (const double end = rt_->now() + (training ? std::max(seconds, max_seconds) + seconds : seconds);;) {
    const LoopAction a = rt_->next_action(end);
    if (a.kind != LoopAction::Kind::Evaluate) break;  // Step: the pause is over; Exit; Wait: our deadline
  }
  loop.end_pause();
  return take_delta();
}

void Node::training_done() {
  check_process();
  std::lock_guard<std::mutex> lk(mu_);
  rt_->loop().gossip().set_done();
}

void Node::report(double test_acc, double loss, double epoch) {
  check_process();
  std::lock_guard<std::mutex> lk(mu_);
  rt_->report_eval(steps_, epoch, loss, test_acc);
}

std::map<std::string, double> Node::stats() {
  std::lock_guard<std::mutex> lk(mu_);
  std::map<std::string, double> s;
  const auto& g = rt_->loop().gossip().stats();
  s["steps"] = static_cast<double>(steps_);
  s["samples"] = static_cast<double>(samples_);
  s["exchanges"] = static_cast<double>(g.exchanges + g.answered);
  s["initiated"] = static_cast<double>(g.exchanges);
  s["answered"] = static_cast<double>(g.answered);
  s["failed"] = static_cast<double>(g.failed);
  s["rejected"] = static_cast<double>(g.rejected);
  s["stale"] = static_cast<double>(g.stale);
  s["peers"] = static_cast<double>(rt_->loop().gossip().view().live_count() + 1);  // alive or suspect, and us
  s["alive"] = static_cast<double>(rt_->loop().gossip().view().alive().size() + 1);
  s["waits"] = static_cast<double>(rt_->loop().stats().waits);
  s["wait_s"] = rt_->loop().stats().wait_seconds;
  const auto ts = rt_->transport_stats();
  s["bytes_sent"] = static_cast<double>(ts.bytes_sent);
  s["bytes_recv"] = static_cast<double>(ts.bytes_recv);
  s["background_drains"] = static_cast<double>(background_drains_);
  // The swarm's samples as this peer knows them (every member's count in the digests, leavers'
  // included): a loop of yours with a swarm-wide budget stops when it reaches its target.
  s["swarm_samples"] = static_cast<double>(rt_->loop().gossip().swarm_samples());
  // Members still training, ourselves included (what lr_scale() counts).
  s["trainers"] = static_cast<double>(rt_->loop().gossip().view().live_trainers() + 1);
  return s;
}

double Node::lr_scale() {
  std::lock_guard<std::mutex> lk(mu_);
  return rt_->loop().lr_scale();
}

void Node::close(double timeout_s) {
  if (closed_ || !rt_) return;
  if (::getpid() != pid_) throw ForkedChild("close the peer in the process that created it");
  if (responder_) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_responder_ = true;
    }
    wake_.notify_all();
    responder_->join();
    responder_.reset();
  }
  std::lock_guard<std::mutex> lk(mu_);
  closed_ = true;
  // Leave as rumor-peer does on SIGTERM (announce, hand the model over: the loop bounds it by
  // leave_wait), within timeout_s; the flush of queued frames gets what is left of it, up to
  // Runtime::kFlushSeconds, and at least a quarter of it.
  const double deadline = rt_->now() + timeout_s;
  const double flush = std::min(peer::Runtime::kFlushSeconds, timeout_s / 4);
  rt_->loop().request_stop();
  while (rt_->next_action(deadline - flush).kind == LoopAction::Kind::Evaluate) {
  }  // evaluation is off; a Step cannot come once stopping
  rt_->finish(std::max(0.0, std::min(flush, deadline - rt_->now())));
}

}  // namespace rumor::python
