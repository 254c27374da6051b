// The daemon's compute thread: training, the gossip protocol (core/gossip.hpp) and reporting.
// The transport (net/) owns the I/O thread; everything it hears arrives through the Inbox and
// is handled here between two steps, so the protocol is single-threaded exactly as in the
// simulator.
#include "peer/daemon.hpp"

#include <spdlog/spdlog.h>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/backend.hpp"
#include "core/env.hpp"
#include "core/gossip.hpp"
#include "core/trainer.hpp"
#include "net/auth.hpp"
#include "net/transport.hpp"
#include "peer/checkpoint.hpp"
#include "peer/data_files.hpp"
#include "peer/inbox.hpp"
#include "peer/metrics.hpp"
#ifdef RUMOR_HAVE_CUDA
#include "gpu/cuda_backend.hpp"
#endif

namespace rumor::peer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
std::uint64_t hash_id(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Env with real time: sends through the transport, timers through the I/O thread's clock,
// events to the log and the metrics file.
class DaemonEnv final : public Env {
 public:
  DaemonEnv(net::Transport& t, Inbox& inbox, MetricsWriter& metrics, spdlog::logger& log, std::uint64_t seed)
      : t_(t), inbox_(inbox), metrics_(metrics), log_(log), rng_(seed) {}
  double now() const override { return seconds_since(start_); }
  void send(const PeerId& to, Message msg) override { t_.send(to, std::move(msg)); }
  void set_timer(double delay_s, std::uint64_t id) override {
    Inbox* inbox = &inbox_;  // outlives the transport's I/O thread; this Env may not
    t_.post_after(delay_s, [inbox, id] { inbox->push({InboxItem::Kind::Timer, {}, {}, {}, id}); });
  }
  void disconnect(const PeerId& peer) override { t_.disconnect(peer); }
  Rng& rng() override { return rng_; }
  void event(const ProtocolEvent& e) override {
    using K = ProtocolEvent::Kind;
    switch (e.kind) {
      case K::ExchangeDone:
        log_.debug("exchange with {} ({}): distance {:.4g}, rtt {:.1f} ms", e.peer, e.reason, e.distance,
                   e.seconds * 1e3);
        metrics_.write("exchange", {{"peer", e.peer}, {"role", e.reason}, {"distance", e.distance},
                                    {"rtt_s", e.seconds}, {"clock", e.clock}, {"peer_clock", e.other}});
        break;
      case K::ExchangeFailed:
        log_.info("exchange with {} failed: {}", e.peer, e.reason);
        metrics_.write("exchange_failed", {{"peer", e.peer}, {"reason", e.reason}});
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
        log_.info("view: {} {}", e.peer, event_kind_name(e.kind));
        metrics_.write(event_kind_name(e.kind), {{"peer", e.peer}});
        break;
      case K::StateReceived:
        log_.info("state transfer from {} complete (step {})", e.peer, e.other);
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
        metrics_.write("wait", {{"clock", e.clock}, {"slowest", e.other}, {"seconds", e.seconds}});
        break;
    }
  }

 private:
  net::Transport& t_;
  Inbox& inbox_;
  MetricsWriter& metrics_;
  spdlog::logger& log_;
  Rng rng_;
  Clock::time_point start_ = Clock::now();
};

std::string bounded_str(double tau) { return std::isfinite(tau) ? std::to_string(static_cast<long long>(tau)) : "inf"; }

// --device cpu | cuda | cuda:N | emulated (the flag's form is checked in config.cpp). Null = the CPU.
std::shared_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return nullptr;
  if (device == "emulated") return std::make_shared<EmulatedDevice>();  // a GPU peer's data flow, on the CPU
  const int index = device.size() > 5 ? std::stoi(device.substr(5)) : 0;
#ifdef RUMOR_HAVE_CUDA
  return gpu::make_cuda_backend(index);  // gpu::NoDevice (exit 1) when there is none
#else
  (void)index;
  throw std::invalid_argument("--device " + device +
                              ": CUDA requested but this build has no CUDA backend (rebuild with RUMOR_CUDA=ON "
                              "where nvcc exists)");
#endif
}

void save_params(const std::string& path, std::span<const float> p) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write --save-params file '" + path + "'");
  const bool ok = std::fwrite(p.data(), sizeof(float), p.size(), f) == p.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("writing --save-params file '" + path + "' failed");
}

}  // namespace

Daemon::Daemon(Config cfg, std::shared_ptr<spdlog::logger> log) : cfg_(std::move(cfg)), log_(std::move(log)) {}
Daemon::~Daemon() = default;

int Daemon::run() {
  // The backend first: a GPU that is not there fails here, before anything slow.
  std::shared_ptr<Backend> backend = make_backend(cfg_.device);
  set_math_threads(cfg_.threads);
  // Trust: a bad key file fails here, before anything slow (std::invalid_argument: exit 2).
  Bytes swarm_key;
  if (!cfg_.swarm_key_path.empty()) {
    net::SwarmKey k = net::load_swarm_key(cfg_.swarm_key_path);
    if (k.readable_by_others)
      log_->warn("--swarm-key '{}' can be read by other users of this machine (chmod 600 it)", cfg_.swarm_key_path);
    swarm_key = std::move(k.secret);
  }
  MetricsWriter metrics(cfg_.metrics_path, cfg_.resume);

  const auto t_load = Clock::now();
  Task task = load_task(cfg_.data);
  const ShardSpec shard_spec = ShardSpec::parse(cfg_.shard);
  const Partition partition = Partition::parse(cfg_.partition);
  auto shard = std::make_shared<Dataset>(take_shard(std::move(task.train), shard_spec, partition, cfg_.seed));
  const std::size_t outputs = shard->classes > 0 ? static_cast<std::size_t>(shard->classes) : shard->target_dim;
  TrainerConfig tc;
  tc.model = cfg_.model;
  tc.optimizer = cfg_.optimizer;
  tc.schedule = cfg_.schedule;
  tc.batch = cfg_.batch;
  tc.seed = cfg_.seed;
  tc.init_seed = cfg_.init_seed;
  tc.backend = backend;
  const std::uint64_t steps_per_epoch = (shard->rows + cfg_.batch - 1) / cfg_.batch;
  if (tc.schedule.kind == "cosine" && tc.schedule.total_steps == 0)
    tc.schedule.total_steps =
        cfg_.steps ? cfg_.steps : static_cast<std::uint64_t>(std::ceil(cfg_.epochs * steps_per_epoch));
  Trainer trainer(tc, shard, shard->dim, outputs);
  log_->info("{}: {} rows ({} partition), test {} rows, model {} ({} parameters), {} lr {} batch {}, device {}; loaded in {:.1f} s",
             shard->name, shard->rows, partition.str(), task.test.rows, trainer.model().fingerprint(),
             trainer.model().param_count(), trainer.optimizer().name(), cfg_.schedule.base_lr, cfg_.batch,
             trainer.backend().name(), seconds_since(t_load));

  // From here on, snapshots and payloads are large buffers allocated per exchange: keep them on
  // the heap (reused) rather than fresh mmaps, whose page faults cost more than the copy. Set
  // only now, so the buffers of data loading went back to the system.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  // --resume: the newest valid checkpoint restores parameters, optimizer state and position.
  std::vector<std::string> resume_view;
  if (cfg_.resume) {
    std::string path;
    if (auto c = load_newest_checkpoint(cfg_.checkpoint_dir, trainer.model().fingerprint(), *log_, &path)) {
      std::copy(c->params.begin(), c->params.end(), trainer.params().begin());
      trainer.params_written();
      trainer.set_optimizer_state(c->optimizer_state, c->optimizer_steps);
      trainer.set_position(c->position);
      resume_view = c->view;
      log_->info("resumed from {}: step {}, epoch {:.2f}", path, c->position.step, trainer.epochs_done());
      metrics.write("resumed", {{"step", c->position.step}, {"path", path}});
    } else {
      log_->warn("--resume: no valid checkpoint in {}; starting from scratch", cfg_.checkpoint_dir);
    }
  }

  // Network: the transport's callbacks only queue work for this thread.
  Inbox inbox;
  const HostPort listen = parse_host_port(cfg_.listen, "--listen", true);
  net::TransportConfig ncfg;
  ncfg.listen_host = listen.host;
  ncfg.listen_port = listen.port;
  ncfg.fingerprint = trainer.model().fingerprint();
  ncfg.max_payload_bytes = trainer.model().param_count() * sizeof(float) + (1u << 20);
  ncfg.swarm_key = swarm_key;
  ncfg.tls_cert = cfg_.tls_cert;
  ncfg.tls_key = cfg_.tls_key;
  ncfg.tls_ca = cfg_.tls_ca;
  std::uint64_t transport_rejected = 0;
  net::TransportEvents nev;
  nev.on_message = [&inbox](const PeerId& from, Message&& m) {
    inbox.push({InboxItem::Kind::Message, from, std::move(m), {}, 0});
  };
  nev.on_send_failed = [&inbox](const PeerId& p, const std::string& why) {
    inbox.push({InboxItem::Kind::SendFailed, p, {}, why, 0});
  };
  nev.on_rejected = [&inbox](const PeerId& p, const std::string& why) {
    inbox.push({InboxItem::Kind::Rejected, p, {}, why, 0});
  };
  net::Transport transport(ncfg, nev, log_);
  transport.start();
  const PeerId self_id = transport.local_id();
  // The I/O thread (started above at normal priority) must not queue behind training on a
  // busy machine: lower this compute thread's priority a little, so a wake-up of the I/O thread
  // preempts it promptly. Exchange round trips fall several-fold when peers share cores.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 5) != 0)
    log_->debug("could not lower the compute thread's priority");
  log_->info("listening on {}{}", self_id, cfg_.join.empty() ? " (new swarm)" : "");
  if (swarm_key.empty() && cfg_.tls_ca.empty())
    log_->warn("swarm is open: anyone who can reach {} can join (use --swarm-key)", self_id);
  else
    log_->info("trust: {}{}", swarm_key.empty() ? "" : "swarm key required (HMAC-SHA256 challenge-response)",
               cfg_.tls_ca.empty() ? "" : fmt::format("{}TLS 1.3, certificates signed by {}", swarm_key.empty() ? "" : "; ",
                                                      cfg_.tls_ca));
  metrics.write("start", {{"peer", self_id},
                          {"unix_time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
                          {"t_offset", metrics.elapsed()},
                          {"device", trainer.backend().name()}});
  log_->info("gossip: every {} local step(s), codec {}, staleness {}, mix weight {}{}", cfg_.local_steps, cfg_.codec,
             bounded_str(cfg_.staleness), cfg_.mix_weight,
             cfg_.throttle > 1 ? fmt::format(", throttled {}x", cfg_.throttle) : std::string());

  DaemonEnv env(transport, inbox, metrics, *log_, cfg_.seed ^ hash_id(self_id));
  GossipConfig gc;
  gc.local_steps = cfg_.local_steps;
  gc.mix_weight = cfg_.mix_weight == "samples" ? MixWeight::Samples : MixWeight::Uniform;
  gc.exchange_timeout_s = cfg_.exchange_timeout_s;
  gc.suspect_timeout_s = cfg_.suspect_timeout_s;
  gc.staleness = cfg_.staleness;
  gc.probe_interval_s = cfg_.probe_interval_s;
  gc.probe_timeout_s = std::min(0.25, cfg_.probe_interval_s / 2);
  gc.join_timeout_s = cfg_.join_timeout_s;  // issue 16: --join-timeout
  // A resumed peer continues from its own saved model; peers starting a swarm together
  // (--min-peers) share their initialisation, so neither fetches the swarm's state.
  gc.fetch_state = !cfg_.resume && cfg_.min_peers <= 1;
  gc.codec = parse_codec(cfg_.codec);
  gc.robust.enabled = cfg_.robust;
  gc.robust.clip_factor = cfg_.robust_clip;
  gc.robust.refuse_factor = cfg_.robust_refuse;
  if (cfg_.robust)
    log_->info("robust mixing: models beyond {} typical distances are clipped, beyond {} refused", cfg_.robust_clip,
               cfg_.robust_refuse > 0 ? fmt::format("{}", cfg_.robust_refuse) : std::string("never"));
  // Incarnation from the wall clock, so a peer restarted on the same address outranks its
  // earlier life in every view.
  const auto incarnation = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  Gossip gossip(env, gc, MemberDigest{self_id, incarnation, MemberState::Alive, 0}, trainer.model().fingerprint(),
                trainer.params());
  std::vector<PeerId> seeds;
  for (const auto& j : cfg_.join) seeds.push_back(parse_host_port(j, "--join", false).str());
  for (const auto& v : resume_view)
    if (v != self_id && std::find(seeds.begin(), seeds.end(), v) == seeds.end()) seeds.push_back(v);
  gossip.start(seeds);

  // Whatever Gossip handles may mix into, or replace, trainer.params(); on a device that is a
  // host mirror, so the trainer is told (it uploads before its next use; a no-op on the CPU).
  auto drain = [&] {
    auto items = inbox.take_all();
    if (!items.empty()) trainer.params_written();
    for (InboxItem& it : items) {
      switch (it.kind) {
        case InboxItem::Kind::Message: gossip.on_message(it.peer, it.msg); break;
        case InboxItem::Kind::SendFailed: gossip.on_send_failed(it.peer, it.reason); break;
        case InboxItem::Kind::Timer: gossip.on_timer(it.timer); break;
        case InboxItem::Kind::Rejected:
          ++transport_rejected;
          metrics.write("rejected", {{"peer", it.peer}, {"reason", it.reason}});
          break;  // the transport already logged it and closed the connection
      }
    }
  };

  // issue 16, --join-timeout: wait until a member of the join list answers (or one reaches us);
  // none within the deadline: exit 1. A peer in its own join list starts the swarm instead.
  while (gossip.joining() && !stop_.load()) {
    inbox.wait_for(std::chrono::milliseconds(5));
    drain();
  }
  if (gossip.join_failed()) {
    log_->error("{}; are the peers up? raise --join-timeout", gossip.join_failure());
    metrics.write("join_failed", {{"reason", gossip.join_failure()}});
    return 1;
  }
  if (gossip.founded())
    log_->info("no other member of the join list answered within {:g} s: this peer starts the swarm", cfg_.join_timeout_s);
  // (end of issue 16's join wait)

  if (cfg_.min_peers > 1) {
    const auto t_wait = Clock::now();
    log_->info("waiting for {} peers before training (up to {:.0f} s)", cfg_.min_peers, cfg_.min_peers_timeout_s);
    while (gossip.view().live_count() + 1 < cfg_.min_peers && !stop_.load() &&
           seconds_since(t_wait) < cfg_.min_peers_timeout_s) {
      inbox.wait_for(std::chrono::milliseconds(5));
      drain();
    }
    if (gossip.view().live_count() + 1 < cfg_.min_peers)
      log_->warn("only {} of {} peers after {:.0f} s: training anyway", gossip.view().live_count() + 1, cfg_.min_peers,
                 seconds_since(t_wait));
    else
      log_->info("{} peers in view after {:.1f} s: training", gossip.view().live_count() + 1, seconds_since(t_wait));
  }

  // A joiner starts from the swarm's model: wait (bounded) for the state transfer.
  if (!gossip.state_ready()) {
    const auto t_state = Clock::now();
    while (!gossip.state_ready() && !stop_.load() && seconds_since(t_state) < 60) {
      inbox.wait_for(std::chrono::milliseconds(5));
      drain();
    }
    if (auto step = gossip.adopted_step()) {
      trainer.adopt_step(*step);
      log_->info("state transfer: took the swarm's model at step {} in {:.2f} s", *step, seconds_since(t_state));
    } else {
      log_->warn("no state transfer ({}): training from our own initialisation",
                 gossip.state_ready() ? "the swarm has not trained yet" : "timed out");
    }
  }

  const auto t_start = Clock::now();
  double train_seconds = 0;     // time spent in steps, for samples/s
  double interval_seconds = 0;  // since the last evaluation
  std::uint64_t interval_samples = 0;
  EvalResult last;
  std::uint64_t waits = 0;        // times the staleness bound held us back
  double wait_seconds = 0;
  std::int64_t max_gap = 0;       // largest clock - slowest seen at a step start since the last eval
  const bool bounded = std::isfinite(cfg_.staleness);
  auto exchanges = [&] { return gossip.stats().exchanges + gossip.stats().answered; };
  auto evaluate = [&](const char* why) {
    last = trainer.evaluate(task.test);
    const double sps = interval_seconds > 0 ? static_cast<double>(interval_samples) / interval_seconds : 0.0;
    const net::TransportStats ts = transport.stats();
    const std::uint64_t peers = gossip.view().live_count() + 1;
    log_->info("epoch {:.2f} step {} loss {:.4f} test_acc {:.4f} samples/s {:.0f} peers {} sent {:.1f} MB exchanges {}{}",
               trainer.epochs_done(), trainer.steps(), last.loss, last.accuracy, sps, peers,
               static_cast<double>(ts.bytes_sent) / 1e6, exchanges(), why);
    metrics.write("eval", {{"step", trainer.steps()},
                           {"epoch", trainer.epochs_done()},
                           {"loss", last.loss},
                           {"test_acc", last.accuracy},
                           {"samples_per_s", sps},
                           {"bytes_sent", ts.bytes_sent},
                           {"bytes_recv", ts.bytes_recv},
                           {"exchanges", exchanges()},
                           {"exchanges_failed", gossip.stats().failed},
                           {"rejected", gossip.stats().rejected + transport_rejected},
                           {"consensus_distance", gossip.stats().last_distance},
                           {"peers", peers},
                           {"codec", cfg_.codec},
                           {"payload_bytes_sent", gossip.stats().payload_bytes_sent},
                           {"payloads_sent", gossip.stats().payloads_sent},
                           {"stale", gossip.stats().stale},
                           {"waits", waits},
                           {"wait_s", wait_seconds},
                           {"max_gap", max_gap},
                           {"robust_clipped", gossip.stats().robust_clipped},
                           {"robust_refused", gossip.stats().robust_refused}});
    interval_seconds = 0;
    interval_samples = 0;
    max_gap = 0;
  };
  auto finished = [&] {
    if (cfg_.steps && trainer.steps() >= cfg_.steps) return true;
    if (cfg_.duration_s > 0 && seconds_since(t_start) >= cfg_.duration_s) return true;
    if (cfg_.epochs > 0 && trainer.epochs_done() >= cfg_.epochs - 1e-9) return true;
    return false;
  };

  auto last_checkpoint = Clock::now();
  auto save_checkpoint = [&] {
    Checkpoint c;
    c.fingerprint = trainer.model().fingerprint();
    c.position = trainer.position();
    c.optimizer_steps = trainer.optimizer().steps();
    c.params.assign(trainer.params().begin(), trainer.params().end());
    const auto state = trainer.optimizer_state();  // a device's copy comes back here
    c.optimizer_state.assign(state.begin(), state.end());
    for (const auto& id : gossip.view().live_ids()) c.view.push_back(id);
    try {
      const std::string path = write_checkpoint(cfg_.checkpoint_dir, c);
      log_->debug("checkpoint {}", path);
      metrics.write("checkpoint", {{"step", trainer.steps()}, {"path", path}});
    } catch (const std::exception& e) {
      log_->error("checkpoint failed: {} (training goes on)", e.what());
    }
  };

  evaluate("");
  std::uint64_t next_epoch_eval = 1;
  int rc = 0;
  while (!finished() && !stop_.load(std::memory_order_relaxed)) {
    drain();
    if (bounded && !gossip.may_step()) {
      // The staleness bound holds: wait (handling messages, probing the slowest) until the
      // slowest live peer catches up or leaves the view.
      const auto t_wait = Clock::now();
      const std::uint64_t slowest_before = gossip.slowest_clock();
      log_->debug("waiting at clock {}: slowest live peer is at {}", trainer.steps(), slowest_before);
      auto last_idle = Clock::now() - std::chrono::hours(1);
      while (!gossip.may_step() && !stop_.load(std::memory_order_relaxed) && !finished()) {
        inbox.wait_for(std::chrono::milliseconds(2));
        drain();
        if (seconds_since(last_idle) > 0.005) {
          gossip.on_idle();
          last_idle = Clock::now();
        }
      }
      const double w = seconds_since(t_wait);
      ++waits;
      wait_seconds += w;
      ProtocolEvent e{ProtocolEvent::Kind::Wait, {}, {}};
      e.clock = trainer.steps();
      e.other = slowest_before;
      e.seconds = w;
      env.event(e);
      if (stop_.load() || finished()) break;
    }
    const auto gap = static_cast<std::int64_t>(trainer.steps()) - static_cast<std::int64_t>(gossip.slowest_clock());
    max_gap = std::max(max_gap, gap);
    if (bounded) {
      metrics.write("step", {{"clock", trainer.steps()}, {"slowest", gossip.slowest_clock()}, {"gap", gap},
                             {"peers", gossip.view().live_count() + 1}});
    }
    const auto t0 = Clock::now();
    const double loss = trainer.compute_gradient();
    drain();  // answer exchanges that arrived during forward/backward without waiting a step
    trainer.apply_gradient();
    double dt = seconds_since(t0);
    if (cfg_.throttle > 1.0) {  // emulate a slower machine: stretch the step, handling messages meanwhile
      const auto until = t0 + std::chrono::duration<double>(dt * cfg_.throttle);
      while (Clock::now() < until) {
        inbox.wait_for(until - Clock::now());
        drain();
      }
      dt = seconds_since(t0);
    }
    train_seconds += dt;
    interval_seconds += dt;
    interval_samples += cfg_.batch;
    if (!std::isfinite(loss)) {
      log_->error("training diverged at step {} (loss {}); lower --lr", trainer.steps(), loss);
      metrics.write("diverged", {{"step", trainer.steps()}});
      rc = 1;
      break;
    }
    gossip.on_step_done(trainer.steps(), trainer.samples());
    if (!cfg_.checkpoint_dir.empty() && seconds_since(last_checkpoint) >= cfg_.checkpoint_every_s) {
      save_checkpoint();
      last_checkpoint = Clock::now();
    }
    const bool due = cfg_.eval_every ? trainer.steps() % cfg_.eval_every == 0
                                     : trainer.epochs_done() >= static_cast<double>(next_epoch_eval) - 1e-9;
    if (due && !finished()) {
      evaluate("");
      if (!cfg_.eval_every) next_epoch_eval = static_cast<std::uint64_t>(std::floor(trainer.epochs_done() + 1e-9)) + 1;
    }
  }
  if (stop_.load()) log_->info("stop requested: finishing at step {}", trainer.steps());
  const double train_wall_s = seconds_since(t_start);  // training loop only, waits included
  drain();
  // Settle: no more training, but keep exchanging (and answering) for a moment, so each peer
  // leaves with close to the swarm's average model rather than its own last local steps. It
  // lasts while peers in the view are still behind our clock (still training), at the pace
  // training had (one exchange per H steps' worth of time, so it costs no more bytes than
  // training did), then for a few more exchanges until the models agree; at most --settle s.
  if (rc == 0 && !stop_.load() && cfg_.settle_s > 0 && gossip.view().live_count() > 0) {
    const auto t_settle = Clock::now();
    const std::uint64_t before = exchanges();
    const std::uint64_t initiated_before = gossip.stats().exchanges;
    const double tick = trainer.steps() ? std::max(0.002, train_seconds / static_cast<double>(trainer.steps()) *
                                                              static_cast<double>(cfg_.local_steps))
                                        : 0.01;
    int close = 0;  // consecutive exchanges with (numerically) the same model
    std::uint64_t seen = before;
    auto settled = [&] {
      if (gossip.slowest_clock() < trainer.steps()) return false;  // others still training
      return close >= 4 || gossip.stats().exchanges - initiated_before >= 8;
    };
    auto last_tick = Clock::now() - std::chrono::hours(1);
    while (seconds_since(t_settle) < cfg_.settle_s && !stop_.load() && gossip.view().live_count() > 0 && !settled()) {
      inbox.wait_for(std::chrono::milliseconds(2));
      drain();
      if (seconds_since(last_tick) >= tick) {
        gossip.on_idle();
        last_tick = Clock::now();
      }
      if (exchanges() != seen) {
        seen = exchanges();
        close = gossip.stats().last_distance < 1e-6 ? close + 1 : 0;
      }
    }
    log_->info("settled: {} exchanges in {:.2f} s after training, last distance {:.4g}", exchanges() - before,
               seconds_since(t_settle), gossip.stats().last_distance);
  }
  if (stop_.load() && gossip.view().live_count() > 0) {
    // Graceful leave (SIGTERM/SIGINT): announce and hand the model over, within a few seconds.
    const auto t_leave = Clock::now();
    gossip.leave();
    while (!gossip.left() && seconds_since(t_leave) < 4.0) {
      inbox.wait_for(std::chrono::milliseconds(5));
      drain();
    }
    log_->info("left the swarm in {:.2f} s{}", seconds_since(t_leave),
               gossip.left() ? "" : " (no neighbour confirmed the hand-over)");
  }
  if (!cfg_.checkpoint_dir.empty()) save_checkpoint();
  evaluate(" (final)");
  if (!stop_.load() && gossip.view().live_count() > 0) gossip.leave(false);  // finished: just say so
  const net::TransportStats ts = transport.stats();
  const double sps = train_seconds > 0 ? static_cast<double>(trainer.samples()) / train_seconds : 0.0;
  metrics.write("done", {{"steps", trainer.steps()},
                         {"test_acc", last.accuracy},
                         {"loss", last.loss},
                         {"samples_per_s", sps},
                         {"wall_s", seconds_since(t_start)},
                         {"train_wall_s", train_wall_s},
                         {"bytes_sent", ts.bytes_sent},
                         {"bytes_recv", ts.bytes_recv},
                         {"exchanges", exchanges()},
                         {"exchanges_failed", gossip.stats().failed}});
  log_->info("done: {} steps in {:.1f} s, test_acc {:.4f}, {:.0f} samples/s, {} exchanges, {:.1f} MB sent",
             trainer.steps(), seconds_since(t_start), last.accuracy, sps, exchanges(),
             static_cast<double>(ts.bytes_sent) / 1e6);
  transport.flush(1.0);
  transport.stop();
  if (!cfg_.save_params_path.empty()) save_params(cfg_.save_params_path, trainer.params());
  return rc;
}

}  // namespace rumor::peer
