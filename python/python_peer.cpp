// The Python module's peer (python_peer.hpp): the one peer loop driven by the user's torch loop.
#include "python/python_peer.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "core/codec.hpp"
#include "net/auth.hpp"
#include "net/transport.hpp"
#include "peer/config.hpp"
#include "peer/metrics.hpp"
#include "peer/runtime.hpp"

namespace rumor::python {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

Node::Node(NodeOptions o) : o_(std::move(o)), pid_(::getpid()) {
  if (o_.size == 0) throw std::invalid_argument("a model needs at least one parameter");
  if (o_.local_steps < 1) throw std::invalid_argument("local_steps must be >= 1");
  if (!(o_.staleness >= 0)) throw std::invalid_argument("staleness must be >= 0");
  if (!(o_.exchange_timeout_s > 0)) throw std::invalid_argument("exchange_timeout must be > 0");
  if (o_.mix_weight != "uniform" && o_.mix_weight != "samples")
    throw std::invalid_argument("mix_weight '" + o_.mix_weight + "': expected uniform or samples");
  log_ = make_logger(o_.name, o_.log_level);
  flat_.assign(o_.size, 0.0f);
  shadow_.assign(o_.size, 0.0f);
  delta_.assign(o_.size, 0.0f);

  peer::RuntimeOptions ro;
  ro.listen = o_.listen;
  ro.join = o_.join;
  ro.fingerprint = o_.fingerprint;
  ro.param_count = o_.size;
  if (!o_.swarm_key_path.empty()) {
    net::SwarmKey k = net::load_swarm_key(o_.swarm_key_path);  // std::invalid_argument naming the file
    if (k.readable_by_others)
      log_->warn("swarm key '{}' can be read by other users of this machine (chmod 600 it)", o_.swarm_key_path);
    ro.swarm_key = std::move(k.secret);
  }
  if (o_.seed >= 0) ro.seed = static_cast<std::uint64_t>(o_.seed);
  LoopSettings ls;
  ls.gossip.local_steps = o_.local_steps;
  ls.gossip.staleness = o_.staleness;
  ls.gossip.codec = parse_codec(o_.codec);  // std::invalid_argument naming the accepted codecs
  ls.gossip.mix_weight = o_.mix_weight == "samples" ? MixWeight::Samples : MixWeight::Uniform;
  ls.gossip.exchange_timeout_s = o_.exchange_timeout_s;
  ls.evaluate = false;      // the user's loop evaluates (report())
  ls.settle_s = 0;          // ... and decides when training ends (serve() keeps averaging)
  ls.state_wait_s = 1e9;    // join(timeout) bounds the wait for the swarm's model
  ls.min_peers = o_.min_peers;
  ls.min_peers_timeout_s = o_.min_peers_timeout_s;  // then train anyway, as rumor-peer does
  // Peers starting a swarm together share their initialisation (as rumor-peer --min-peers).
  ls.gossip.fetch_state = o_.min_peers <= 1;
  ls.gossip.fetch_extra_state = true;  // the optimizer state, when the source publishes one
  metrics_ = std::make_unique<peer::MetricsWriter>(o_.metrics_path);  // std::runtime_error naming the path
  rt_ = std::make_unique<peer::Runtime>(ro, ls.resolved(), *this, *metrics_, log_);
  // Gossip is about to handle inputs: keep the buffer as the live parameters last saw it.
  rt_->on_params_written = [this] {
    if (!shadow_current_) {
      std::memcpy(shadow_.data(), flat_.data(), flat_.size() * sizeof(float));
      shadow_current_ = true;
    }
    maybe_written_ = true;
  };
  metrics_->write("start", {{"peer", rt_->id()},
                            {"unix_time", std::chrono::duration<double>(
                                              std::chrono::system_clock::now().time_since_epoch()).count()},
                            {"t_offset", metrics_->elapsed()},
                            {"device", std::string("python")}});
  log_->info("listening on {}{}; model {} ({} parameters)", rt_->id(), o_.join.empty() ? " (new swarm)" : "",
             o_.fingerprint, o_.size);
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
  Entry(Node& node, bool owns_after) : n(node), lk(node.mu_), user_owns_after(owns_after) {}
  ~Entry() {
    n.user_owns_ = user_owns_after;
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

void Node::drain() { rt_->drain(); }

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
  const auto t0 = Clock::now();
  for (;;) {
    drain();
    const LoopAction a = rt_->loop().next();
    switch (a.kind) {
      case LoopAction::Kind::Step: return true;
      case LoopAction::Kind::Evaluate: continue;  // evaluation is off; nothing to do
      case LoopAction::Kind::Exit: return false;
      case LoopAction::Kind::Wait: break;
    }
    const double left = timeout_s - since(t0);
    if (left <= 0 || (give_up && give_up())) return false;
    rt_->wait(std::min(a.until, rt_->now() + left));
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
  seconds_ += seconds;
  rt_->loop().step_done(loss, seconds, samples);
  if (!until_step(wait_timeout_s)) throw_not_ready("the staleness bound held this peer back", wait_timeout_s);
  return take_delta();
}

bool Node::serve(double seconds, double max_seconds) {
  check_process();
  Entry entry(*this, false);
  double last_idle = -1;
  // Exchanges every kSettleTickUntrained while the models still differ, so that the peers end
  // together; once the last exchange found the two models equal (kSettledDistance), no faster
  // than training did (as a settling rumor-peer): peers that have finished hold still, equal
  // models, and swapping them every few ms only takes the cores that a peer still training
  // (and evaluating) needs.
  const double slow = rt_->loop().training_pace(LoopSettings::kSettleMinTick, LoopSettings::kSettleTickUntrained);
  const double fast = std::min(slow, LoopSettings::kSettleTickUntrained);
  // Up to max_seconds while a live member is behind our clock (still training), `seconds`
  // after the last one caught up, as a settling rumor-peer.
  SettleDeadline deadline;
  deadline.begin(rt_->now());
  for (;;) {
    const double tick = rt_->gossip().stats().last_distance < LoopSettings::kSettledDistance ? slow : fast;
    drain();
    const LoopAction a = rt_->loop().next();
    const double now = rt_->now();
    deadline.update(now, rt_->loop().others_behind());
    const double end = deadline.end(seconds, max_seconds);
    if (a.kind == LoopAction::Kind::Exit || now >= end) break;
    if (a.kind == LoopAction::Kind::Evaluate) continue;
    double until = end;
    if (a.kind == LoopAction::Kind::Step) {
      // Not training: keep averaging as a settling peer does (Gossip::on_idle starts an
      // exchange when a slot is free), at most once per `tick`.
      if (last_idle < 0 || now - last_idle >= tick) {
        rt_->gossip().on_idle();
        last_idle = now;
      }
      until = std::min(until, last_idle + tick);
    } else {
      until = std::min(until, a.until);
    }
    rt_->wait(until);
  }
  return take_delta();
}

void Node::report(double test_acc, double loss, double epoch) {
  check_process();
  std::lock_guard<std::mutex> lk(mu_);
  last_acc_ = test_acc;
  last_loss_ = loss;
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
  return s;
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
  const auto t0 = Clock::now();
  // Leave: announce and hand the model over (the loop bounds it by leave_wait_s; we by timeout_s).
  PeerLoop& loop = rt_->loop();
  loop.request_stop();
  const double budget = std::max(0.0, timeout_s - 0.8);  // keep some for the flush and the stop
  for (;;) {
    rt_->drain();
    const LoopAction a = loop.next();
    if (a.kind == LoopAction::Kind::Exit) break;
    if (a.kind == LoopAction::Kind::Evaluate) continue;  // evaluation is off
    if (a.kind == LoopAction::Kind::Step) continue;      // cannot happen once stopping; be safe
    const double left = budget - since(t0);
    if (left <= 0) break;
    rt_->wait(std::min(a.until, rt_->now() + left));
  }
  const net::TransportStats ts = rt_->transport_stats();
  const LoopStats& ls = loop.stats();
  metrics_->write("done", {{"steps", steps_},
                           {"test_acc", last_acc_},
                           {"loss", last_loss_},
                           {"samples_per_s", ls.train_seconds > 0 ? static_cast<double>(samples_) / ls.train_seconds : 0.0},
                           {"wall_s", ls.training_started >= 0 ? rt_->now() - ls.training_started : 0.0},
                           {"bytes_sent", ts.bytes_sent},
                           {"bytes_recv", ts.bytes_recv},
                           {"exchanges", loop.exchanges()},
                           {"exchanges_failed", loop.gossip().stats().failed}});
  log_->info("closed: {} steps, {} exchanges, {:.1f} MB sent, in {:.2f} s", steps_, loop.exchanges(),
             static_cast<double>(ts.bytes_sent) / 1e6, since(t0));
  rt_->close(std::clamp(timeout_s - since(t0) - 0.3, 0.0, 0.5));
}

}  // namespace rumor::python
