// Runtime: the transport, the inbox, a real-time Env and the loop of one peer (runtime.hpp).
#include "peer/runtime.hpp"

#include <spdlog/spdlog.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <sys/resource.h>
#include <time.h>

#include "core/codec.hpp"
#include "core/env.hpp"
#include "core/overlay.hpp"
#include "net/address.hpp"
#include "net/auth.hpp"
#include "net/transport.hpp"
#include "peer/config.hpp"
#include "peer/inbox.hpp"
#include "peer/metrics.hpp"
#include "peer/metrics_endpoint.hpp"

namespace rumor::peer {

namespace {
using Clock = std::chrono::steady_clock;
constexpr double kStopPoll = 0.02;  // how often a wait looks at the stop flag (signals set it)

double cpu_clock_seconds(clockid_t id) {
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The calling thread's CPU seconds, as the kernel last accounted them (at its last tick or
// switch). Unlike CLOCK_THREAD_CPUTIME_ID and CLOCK_PROCESS_CPUTIME_ID, reading it does not
// make the kernel account the running thread there and then, which under a CFS quota would
// throttle the thread at the read: read around every drain and step, those clocks took the
// throttled time out of the steps, and a peer capped at 0.4 of a core reported the samples/s
// of a whole one (tests/testbed "testbed cpu"). Over many reads the difference is unbiased.
double thread_cpu_seconds() {
  rusage r{};
  if (getrusage(RUSAGE_THREAD, &r) != 0) return -1;
  const auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return secs(r.ru_utime) + secs(r.ru_stime);
}
}  // namespace

std::uint64_t id_hash(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

// Env with real time: sends through the transport, timers through the I/O thread's clock,
// events to the log and the metrics file.
class Runtime::RealEnv final : public Env {
 public:
  RealEnv(net::Transport& t, Inbox& inbox, MetricsWriter& metrics, spdlog::logger& log, std::uint64_t seed,
          std::size_t min_peers)
      : t_(t), inbox_(inbox), metrics_(metrics), log_(log), rng_(seed), min_peers_(min_peers) {}
  double now() const override { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void send(const PeerId& to, Message msg) override { t_.send(to, std::move(msg)); }
  void set_timer(double delay_s, std::uint64_t id) override {
    Inbox* inbox = &inbox_;  // outlives the transport's I/O thread; this Env may not
    t_.post_after(std::max(delay_s, 0.0), [inbox, id] { inbox->push({InboxItem::Kind::Timer, {}, {}, {}, id}); });
  }
  void disconnect(const PeerId& peer) override { t_.disconnect(peer); }
  Rng& rng() override { return rng_; }
  void event(const ProtocolEvent& e) override;
  // The process's CPU (every thread: a CPU cap holds them all); the protocol's part: the
  // compute thread's CPU inside the protocol's handlers (Runtime::drain, Runtime::step_done:
  // ProtocolCpu) and the transport's I/O thread (it frames, hashes and checks every payload).
  CpuClocks cpu() const override {
    const double io = t_.io_cpu_seconds();
    return {cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID), protocol_cpu + std::max(io, 0.0)};
  }
  double protocol_cpu = 0;
  std::uint64_t settle_bytes0 = 0;  // bytes sent when the current settling began (Runtime::next_action)
  // The HTTP endpoint counts events as they come (null: none), and the bytes of the snapshot
  // each exchange sent, read off Gossip's totals.
  MetricsEndpoint* endpoint = nullptr;
  // Set once it exists: its Gossip (the overlay, the payload totals), settings and stats.
  const PeerLoop* loop = nullptr;

 private:
  double exchange_payload_bytes();
  void hint_swarm_budget(double behind, double settled_for);
  // The hint above: a wait of at least this long, and this share of the peer's training time.
  static constexpr double kBehindHintSeconds = 2.0, kBehindHintShare = 0.25;
  std::uint64_t payload_bytes_seen_ = 0, payloads_seen_ = 0;
  net::Transport& t_;
  Inbox& inbox_;
  MetricsWriter& metrics_;
  spdlog::logger& log_;
  Rng rng_;
  std::size_t min_peers_;
  Clock::time_point start_ = Clock::now();
};

// A peer that finished its own budget and then waited long for members still training is on
// machines of different speeds with a budget per peer: say what shares the work instead (on
// the testbed's S2, a straggler at a quarter of the others' CPU, the fast peers trained 3.5 s
// and waited 16 s; with --swarm-epochs the swarm ended in 13.9 s instead of 30.3 s).
void Runtime::RealEnv::hint_swarm_budget(double behind, double settled_for) {
  const LoopStats& st = loop->stats();
  // rumor-peer's training loop ends before settling; the Python module's stays in Training and
  // settles in a pause, which began `settled_for` ago.
  const double ended = st.training_ended >= 0 ? st.training_ended : now() - settled_for;
  const double trained = st.training_started >= 0 ? std::max(0.0, ended - st.training_started) : 0.0;
  if (loop->settings().swarm_samples || behind < kBehindHintSeconds || behind < kBehindHintShare * trained) return;
  log_.warn("settling waited {:.1f} s for slower peers still training (this peer trained {:.1f} s): with a swarm-wide "
            "budget (--swarm-epochs or --swarm-samples in place of --epochs/--steps; swarm_epochs= on rumor.Peer) "
            "the swarm shares the samples by speed and every peer finishes together (with a decaying "
            "--lr-schedule, wsd or cosine, that follows the swarm's progress)",
            behind, trained);
}

// Bytes of one parameter snapshot sent since the last completed exchange (their mean: a codec's
// snapshots all have the size of the model's encoding). ExchangeDone does not carry them.
double Runtime::RealEnv::exchange_payload_bytes() {
  if (!loop) return 0;
  const GossipStats& gs = loop->gossip().stats();
  const std::uint64_t n = gs.payloads_sent - payloads_seen_, b = gs.payload_bytes_sent - payload_bytes_seen_;
  payloads_seen_ = gs.payloads_sent;
  payload_bytes_seen_ = gs.payload_bytes_sent;
  if (n > 0) return static_cast<double>(b) / static_cast<double>(n);
  return gs.payloads_sent ? static_cast<double>(gs.payload_bytes_sent) / static_cast<double>(gs.payloads_sent) : 0.0;
}

void Runtime::RealEnv::event(const ProtocolEvent& e) {
  using K = ProtocolEvent::Kind;
  if (endpoint) {
    switch (e.kind) {
      case K::ExchangeDone: endpoint->exchange_done(e.reason == "initiator", e.seconds, exchange_payload_bytes()); break;
      case K::ExchangeFailed: endpoint->exchange_failed(); break;
      case K::ExchangeDeclined: endpoint->exchange_declined(); break;
      case K::Rejected: endpoint->rejected(); break;
      case K::StateReceived: endpoint->state_transfer(true); break;
      case K::StateFailed: endpoint->state_transfer(false); break;
      case K::Handover: endpoint->handover(); break;
      default: break;
    }
  }
  switch (e.kind) {
    case K::ExchangeDone:
      log_.debug("exchange with {} ({}): distance {:.4g}, rtt {:.1f} ms", e.peer, e.reason, e.distance, e.seconds * 1e3);
      metrics_.write("exchange", {{"peer", e.peer}, {"role", e.reason}, {"distance", e.distance},
                                  {"rtt_s", e.seconds}, {"clock", e.clock}, {"peer_clock", e.other},
                                  {"codec", codec_name(e.codec)}});
      break;
    case K::ExchangeFailed:
      // Unreachable: the transport has said so once already (net: ... is unreachable).
      if (e.reason.rfind("unreachable", 0) == 0)
        log_.debug("exchange with {} failed: {}", e.peer, e.reason);
      else
        log_.info("exchange with {} failed: {}", e.peer, e.reason);
      metrics_.write("exchange_failed", {{"peer", e.peer}, {"reason", e.reason}});
      break;
    case K::ExchangeDeclined:
      log_.debug("exchange with {} declined: {}", e.peer, e.reason);
      metrics_.write("exchange_declined", {{"peer", e.peer}, {"reason", e.reason}});
      break;
    case K::Rejected:
      log_.warn("rejected input from {}: {} (nothing mixed; training goes on)", e.peer, e.reason);
      metrics_.write("rejected", {{"peer", e.peer}, {"reason", e.reason}});
      break;
    case K::Joined:
      log_.info("joined the swarm through {}", e.peer);
      metrics_.write("joined", {{"peer", e.peer}});
      break;
    case K::Join:
    case K::Leave:
    case K::Dead:
    case K::Suspect:
      // A suspicion is a step on the way to "dead" or back (metrics keep it): debug. With
      // partial views a "join" is a candidate taken into the passive view, which shuffles
      // refresh all the time (thousands of lines a minute in a 64-peer swarm): debug too.
      if (e.kind == K::Suspect || (e.kind == K::Join && loop && loop->gossip().overlay()))
        log_.debug("view: {} {}", e.peer, event_kind_name(e.kind));
      else
        log_.info("view: {} {}", e.peer, event_kind_name(e.kind));
      metrics_.write(event_kind_name(e.kind), {{"peer", e.peer}});
      break;
    case K::StateReceived:
      log_.info("state transfer from {} complete (step {}){}{}", e.peer, e.other, e.reason.empty() ? "" : ": ", e.reason);
      metrics_.write("state_received", {{"peer", e.peer}, {"step", e.other}});
      break;
    case K::StateFailed:
      log_.warn("state transfer failed: {}", e.reason);
      metrics_.write("state_failed", {{"reason", e.reason}});
      break;
    case K::Handover:
      log_.info("took over the model of {}, which is leaving (distance {:.4g})", e.peer, e.distance);
      metrics_.write("handover", {{"peer", e.peer}, {"distance", e.distance}, {"peer_clock", e.other}});
      break;
    case K::Wait:
      log_.debug("waited {:.3f} s at clock {}: slowest live peer was at {}", e.seconds, e.clock, e.other);
      metrics_.write("wait", {{"clock", e.clock}, {"slowest", e.other}, {"seconds", e.seconds}});
      break;
    case K::JoinFailed:
      log_.error("{}; are the peers up? raise --join-timeout", e.reason);
      metrics_.write("join_failed", {{"reason", e.reason}});
      break;
    case K::Founded:
      log_.info("no other member of the join list answered within {:g} s: this peer starts the swarm", e.seconds);
      metrics_.write("founded", {{"seconds", e.seconds}});
      break;
    case K::PeersInView:
      if (e.reason.empty())
        log_.info("{} peers in view after {:.1f} s: training", e.other, e.seconds);
      else
        log_.warn("only {} of {} peers after {:.0f} s: training anyway", e.other, min_peers_, e.seconds);
      metrics_.write("peers_in_view", {{"peers", e.other}, {"seconds", e.seconds}});
      break;
    case K::Training:
      if (e.reason.empty())
        log_.info("state transfer: took the swarm's model at step {} in {:.2f} s", e.other, e.seconds);
      else
        log_.warn("no state transfer ({}): training from our own initialisation", e.reason);
      break;
    case K::Diverged:
      log_.error("training diverged at step {} (loss {}); lower --lr", e.clock, e.reason);
      metrics_.write("diverged", {{"step", e.clock}});
      break;
    case K::Settled: {
      const bool pause = e.reason == "pause";  // PeerLoop::pause (the Python module's serve())
      if (pause)
        log_.debug("paused training: {} exchanges in {:.2f} s, last distance {:.4g}", e.other, e.seconds, e.distance);
      else
        log_.info("settled: {} exchanges in {:.2f} s after training, last distance {:.4g}", e.other, e.seconds, e.distance);
      // A pause is the Python module's serve(); the one close() makes after training (the
      // digest says done: Node::training_done) is its settling after training.
      const bool after_training = loop && (!pause || loop->gossip().done());
      const double behind = after_training ? loop->stats().settle_behind_seconds : 0.0;
      if (after_training) hint_swarm_budget(behind, e.seconds);
      const std::uint64_t sent = t_.stats().bytes_sent;
      metrics_.write("settled", {{"exchanges", e.other},
                                 {"seconds", e.seconds},
                                 {"behind_seconds", behind},
                                 {"distance", e.distance},
                                 {"pause", pause},
                                 {"bytes_sent", sent - std::min(sent, settle_bytes0)},
                                 {"bytes_sent_before", settle_bytes0}});
      break;
    }
    case K::Departed:
      log_.info("left the swarm in {:.2f} s{}", e.seconds, e.reason.empty() ? "" : " (" + e.reason + ")");
      break;
  }
}

Bytes read_swarm_key(const std::string& path, spdlog::logger& log) {
  if (path.empty()) return {};
  net::SwarmKey k = net::load_swarm_key(path);  // std::invalid_argument naming the file
  if (k.readable_by_others) log.warn("swarm key '{}' can be read by other users of this machine (chmod 600 it)", path);
  return std::move(k.secret);
}

void Runtime::report_eval(std::uint64_t step, double epoch, double loss, double test_acc, const std::string& note) {
  last_acc_ = test_acc;
  last_loss_ = loss;
  PeerLoop& loop = *loop_;
  const LoopStats& ls = loop.stats();
  const double sps = ls.interval_seconds > 0 ? static_cast<double>(ls.interval_samples) / ls.interval_seconds : 0.0;
  const net::TransportStats ts = transport_stats();
  const GossipStats& gs = loop.gossip().stats();
  const std::uint64_t peers = loop.gossip().view().live_count() + 1;
  const Overlay* overlay = loop.gossip().overlay();  // partial views (null: full)
  log_->info("epoch {:.2f} step {} loss {:.4f} test_acc {:.4f} samples/s {:.0f} peers {} sent {:.1f} MB exchanges {}{}",
             epoch, step, loss, test_acc, sps, peers, static_cast<double>(ts.bytes_sent) / 1e6, loop.exchanges(), note);
  metrics_.write("eval", {{"step", step},
                          {"epoch", epoch},
                          {"loss", loss},
                          {"test_acc", test_acc},
                          {"samples_per_s", sps},
                          {"bytes_sent", ts.bytes_sent},
                          {"bytes_recv", ts.bytes_recv},
                          {"exchanges", loop.exchanges()},
                          {"exchanges_failed", gs.failed},
                          {"exchanges_declined", gs.declined},
                          {"rejected", gs.rejected + transport_rejected_},
                          {"consensus_distance", gs.last_distance},
                          {"peers", peers},
                          {"view_active", overlay ? overlay->active().size() : peers - 1},
                          {"view_passive", overlay ? overlay->passive().size() : 0},
                          {"codec", codec_name(loop.gossip().codec_now())},
                          {"local_steps", loop.gossip().local_steps_now()},
                          {"payload_bytes_sent", gs.payload_bytes_sent},
                          {"payloads_sent", gs.payloads_sent},
                          {"int4_absolute", gs.int4_absolute},
                          {"stale", gs.stale},
                          {"waits", ls.waits},
                          {"wait_s", ls.wait_seconds},
                          {"max_gap", ls.max_gap},
                          {"robust_clipped", gs.robust_clipped},
                          {"robust_refused", gs.robust_refused}});
  if (endpoint_) {
    endpoint_->eval(now(), step, test_acc, loss);
    publish(true);
  }
  loop.reset_interval();
}

Runtime::Runtime(const RuntimeOptions& o, const LoopSettings& settings, LoopModel& model, MetricsWriter& metrics,
                 std::shared_ptr<spdlog::logger> log)
    : log_(std::move(log)), metrics_(metrics), inbox_(std::make_unique<Inbox>()) {
  const net::HostPort listen = net::parse_host_port(o.listen, "--listen", true);
  for (const auto& j : o.join) seeds_.push_back(net::parse_host_port(j, "--join", false).str());
  net::TransportConfig ncfg;
  ncfg.listen_host = listen.host;
  ncfg.listen_port = listen.port;
  ncfg.fingerprint = o.fingerprint;
  ncfg.max_payload_bytes = o.param_count * sizeof(float) + (1u << 20);
  ncfg.swarm_key = o.swarm_key;
  ncfg.tls_cert = o.tls_cert;
  ncfg.tls_key = o.tls_key;
  ncfg.tls_ca = o.tls_ca;
  // The transport's callbacks only queue work for the compute thread.
  Inbox* inbox = inbox_.get();
  net::TransportEvents nev;
  nev.on_message = [inbox](const PeerId& from, Message&& m) {
    inbox->push({InboxItem::Kind::Message, from, std::move(m), {}, 0});
  };
  nev.on_send_failed = [inbox](const PeerId& p, const std::string& why) {
    inbox->push({InboxItem::Kind::SendFailed, p, {}, why, 0});
  };
  nev.on_rejected = [inbox](const PeerId& p, const std::string& why) {
    inbox->push({InboxItem::Kind::Rejected, p, {}, why, 0});
  };
  transport_ = std::make_unique<net::Transport>(ncfg, nev, log_);
  transport_->start();
  id_ = transport_->local_id();
  device_ = o.device;
  if (!o.metrics_listen.empty()) {
    try {
      endpoint_ = std::make_unique<MetricsEndpoint>(o.metrics_listen, o.metrics_flag, id_, o.name, log_);
    } catch (...) {
      transport_->stop();
      throw;
    }
  }
  env_ = std::make_unique<RealEnv>(*transport_, *inbox_, metrics_, *log_, o.seed ^ id_hash(id_), settings.min_peers);
  // Incarnation from the wall clock, so a peer restarted on the same address outranks its
  // earlier life in every view.
  const std::uint64_t incarnation =
      o.incarnation ? o.incarnation
                    : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     std::chrono::system_clock::now().time_since_epoch())
                                                     .count());
  loop_ = std::make_unique<PeerLoop>(*env_, settings, MemberDigest{id_, incarnation, MemberState::Alive, 0},
                                     o.fingerprint, model);
  env_->loop = loop_.get();
  if (endpoint_) {
    env_->endpoint = endpoint_.get();
    endpoint_->set_unix_origin(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - env_->now());
  }
}

Runtime::~Runtime() { close(0.0); }

Env& Runtime::env() { return *env_; }
double Runtime::now() const { return env_->now(); }
net::TransportStats Runtime::transport_stats() const { return transport_->stats(); }

void Runtime::start(const std::vector<PeerId>& more) {
  metrics_.write("start", {{"peer", id_},
                           {"unix_time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
                           {"t_offset", metrics_.elapsed()},
                           {"device", device_}});
  log_->info("listening on {}{}", id_, seeds_.empty() && more.empty() ? " (new swarm)" : "");
  if (endpoint_)
    log_->info("metrics on http://{}/metrics, swarm page http://{}/", endpoint_->address(), endpoint_->address());
  std::vector<PeerId> seeds = seeds_;
  for (const auto& v : more)
    if (v != id_ && std::find(seeds.begin(), seeds.end(), v) == seeds.end()) seeds.push_back(v);
  loop_->start(seeds);
}

LoopAction Runtime::next_action(double deadline, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop && stop->load(std::memory_order_relaxed) && !loop_->stop_requested()) {
      loop_->request_stop();
      if (!stop_logged_ && loop_->phase() == LoopPhase::Training)
        log_->info("stop requested: finishing at step {}", loop_->model().steps());
      stop_logged_ = true;
    }
    drain();
    const LoopAction a = loop_->next();
    const bool settling = loop_->phase() == LoopPhase::Settling;
    if (settling && !was_settling_) env_->settle_bytes0 = transport_stats().bytes_sent;  // for the "settled" line
    was_settling_ = settling;
    publish();
    if (a.kind != LoopAction::Kind::Wait || now() >= deadline) return a;
    wait(std::min(a.until, deadline), stop);
  }
}

void Runtime::finish(double flush_s) {
  if (closed_) return;
  const LoopStats& st = loop_->stats();
  if (st.training_started >= 0) {  // it trained (a failed join or an early stop did not)
    const LoopModel& m = loop_->model();
    const double t_start = st.training_started, t_end = st.training_ended >= 0 ? st.training_ended : now();
    const net::TransportStats ts = transport_stats();
    const GossipStats& gs = loop_->gossip().stats();
    const double sps = st.train_seconds > 0 ? static_cast<double>(m.samples()) / st.train_seconds : 0.0;
    metrics_.write("done", {{"steps", m.steps()},
                            {"test_acc", last_acc_},
                            {"loss", last_loss_},
                            {"samples_per_s", sps},
                            {"wall_s", now() - t_start},
                            {"train_wall_s", t_end - t_start},
                            {"bytes_sent", ts.bytes_sent},
                            {"bytes_recv", ts.bytes_recv},
                            {"exchanges", loop_->exchanges()},
                            {"exchanges_failed", gs.failed},
                            {"exchanges_declined", gs.declined}});
    log_->info("done: {} steps in {:.1f} s, test_acc {:.4f}, {:.0f} samples/s, {} exchanges, {:.1f} MB sent", m.steps(),
               now() - t_start, last_acc_, sps, loop_->exchanges(), static_cast<double>(ts.bytes_sent) / 1e6);
  }
  close(flush_s);
}

// Adds the calling thread's CPU from here to the end of the scope to Env::cpu()'s protocol part,
// when Gossip reads it (Gossip::uses_cpu_clocks(): two system calls a step otherwise spent for
// nothing, and inside a step's timed part where the drain runs, which --throttle multiplies).
class Runtime::ProtocolCpu {
 public:
  ProtocolCpu(RealEnv& env, bool on) : env_(env), start_(on ? thread_cpu_seconds() : -1) {}
  ~ProtocolCpu() {
    if (start_ < 0) return;
    const double end = thread_cpu_seconds();
    if (end >= start_) env_.protocol_cpu += end - start_;
  }
  ProtocolCpu(const ProtocolCpu&) = delete;
  ProtocolCpu& operator=(const ProtocolCpu&) = delete;

 private:
  RealEnv& env_;
  double start_;
};

void Runtime::step_done(double loss, double seconds, std::uint64_t samples) {
  const ProtocolCpu cpu(*env_, loop_->gossip().uses_cpu_clocks());
  loop_->step_done(loss, seconds, samples);
}

bool Runtime::drain() {
  auto items = inbox_->take_all();
  if (items.empty()) return false;
  const ProtocolCpu cpu(*env_, loop_->gossip().uses_cpu_clocks());
  if (on_params_written) on_params_written();
  Gossip& g = loop_->gossip();
  for (InboxItem& it : items) {
    switch (it.kind) {
      case InboxItem::Kind::Message: g.on_message(it.peer, it.msg); break;
      case InboxItem::Kind::SendFailed: g.on_send_failed(it.peer, it.reason); break;
      case InboxItem::Kind::Timer: g.on_timer(it.timer); break;
      case InboxItem::Kind::Rejected:
        ++transport_rejected_;
        last_rejection_ = it.reason;
        if (endpoint_) endpoint_->rejected();
        metrics_.write("rejected", {{"peer", it.peer}, {"reason", it.reason}});
        break;  // the transport already logged it and closed the connection
    }
  }
  return true;
}

void Runtime::wait(double until, const std::atomic<bool>* stop) {
  for (;;) {
    const double left = until - now();
    if (left <= 0 || (stop && stop->load(std::memory_order_relaxed))) break;
    if (inbox_->wait_for(std::chrono::duration<double>(std::min(left, kStopPoll)))) break;
  }
  drain();
}

void Runtime::sleep_for(double seconds, const std::atomic<bool>* stop) {
  const double until = now() + seconds;
  while (now() < until && !(stop && stop->load(std::memory_order_relaxed))) wait(until, stop);
}

std::string Runtime::metrics_address() const { return endpoint_ ? endpoint_->address() : std::string(); }

void Runtime::publish(bool force) {
  if (!endpoint_) return;
  const double t = now();
  if (!force && !endpoint_->publish_due(t)) return;
  const PeerLoop& loop = *loop_;
  const Gossip& g = loop.gossip();
  const LoopStats& ls = loop.stats();
  const GossipStats& gs = g.stats();
  const net::TransportStats ts = transport_->stats();
  PeerSample s;
  s.t = t;
  s.phase = loop_phase_name(loop.phase());
  s.clock = loop.model().steps();
  s.samples = loop.model().samples();
  s.bytes_sent = ts.bytes_sent;
  s.bytes_recv = ts.bytes_recv;
  s.waits = ls.waits;
  s.wait_seconds = ls.wait_seconds;
  s.train_seconds = ls.train_seconds;
  s.robust_clipped = gs.robust_clipped;
  s.robust_refused = gs.robust_refused;
  s.stale = gs.stale;
  s.distance = gs.last_distance;
  s.training_started = ls.training_started;
  const View& v = g.view();
  s.alive = v.alive().size() + 1;
  s.suspect = v.live_count() - v.alive().size();
  if (endpoint_->members_due(t)) {
    // One pass over the view (about once a second): the slowest and fastest clocks, the rows.
    s.members.push_back({id_, "alive", s.clock});
    s.members_total = v.members().size() + 1;
    std::uint64_t slowest = s.clock, fastest = s.clock;
    bool any = false;
    for (const Member& m : v.members()) {
      if (m.d.state == MemberState::Alive) {
        slowest = any ? std::min(slowest, m.d.clock) : m.d.clock;
        any = true;
      }
      if (m.live()) fastest = std::max(fastest, m.d.clock);
      if (s.members.size() < kMaxMemberRows) s.members.push_back({m.d.id, member_state_name(m.d.state), m.d.clock});
    }
    s.slowest = slowest;
    s.fastest = fastest;
    slowest_ = slowest;
    fastest_ = fastest;
  } else {
    s.slowest = slowest_;  // as of the last pass (at most a second old)
    s.fastest = fastest_;
  }
  endpoint_->publish(s);
}

void Runtime::close(double flush_s) {
  if (closed_) return;
  closed_ = true;
  if (endpoint_) publish(true);  // the final values, for a scrape during the flush
  if (flush_s > 0) {
    // A peer that left goes on answering while its last bytes drain: a request that reaches
    // it now gets its busy reply ("leaving"), not silence until the requester's deadline.
    // Whatever arrives after the last drain is never read or handled; the requester's
    // transport reports it when the connection closes (net/transport.hpp, on_send_failed).
    const bool answer = loop_->gossip().leaving();
    const double until = now() + flush_s;
    for (;;) {
      const double left = until - now();
      if (left <= 0) break;
      const bool flushed = transport_->flush(answer ? std::min(left, kCloseSlice) : left);
      if (!(answer && drain()) && flushed) break;
    }
  }
  transport_->stop();
  // The HTTP endpoint goes with the network: its port is free again (a Python process may
  // start another peer on it), and nothing is published after this.
  if (endpoint_) {
    env_->endpoint = nullptr;
    endpoint_.reset();
  }
}

}  // namespace rumor::peer
