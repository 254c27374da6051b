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
#include "core/peer_loop.hpp"
#include "core/trainer.hpp"
#include "data/files.hpp"
#include "data/partition.hpp"
#include "net/auth.hpp"
#include "net/transport.hpp"
#include "peer/checkpoint.hpp"
#include "peer/gpu_plugin.hpp"
#include "peer/metrics.hpp"
#include "peer/runtime.hpp"

namespace rumor::peer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
std::string bounded_str(double tau) { return std::isfinite(tau) ? std::to_string(static_cast<long long>(tau)) : "inf"; }

// --device cpu | cuda | cuda:N | emulated (the flag's form is checked in config.cpp). Null = the CPU.
std::shared_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return nullptr;
  if (device == "emulated") return std::make_shared<EmulatedDevice>();  // a GPU peer's data flow, on the CPU
  const int index = device.size() > 5 ? std::stoi(device.substr(5)) : 0;
  if (!cuda_built())
    throw std::invalid_argument("--device " + device +
                                ": CUDA requested but this build has no CUDA backend (rebuild with RUMOR_CUDA=ON "
                                "where nvcc exists)");
  return make_cuda_backend(index);  // loads librumor_gpu.so; gpu::NoDevice (exit 1) when there is none
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
  const Bytes swarm_key = read_swarm_key(cfg_.swarm_key_path, *log_);
  MetricsWriter metrics(cfg_.metrics_path, cfg_.resume);

  const auto t_load = Clock::now();
  Task task = load_task(cfg_.data);
  const ShardSpec shard_spec = ShardSpec::parse(cfg_.shard);
  const Partition partition = Partition::parse(cfg_.partition);
  const std::uint64_t train_set_rows = task.train.rows;  // the whole set: --swarm-epochs counts passes over it
  auto shard = std::make_shared<Dataset>(take_shard(std::move(task.train), shard_spec, partition, cfg_.seed));
  const std::size_t outputs = shard->classes > 0 ? static_cast<std::size_t>(shard->classes) : shard->target_dim;
  TrainerConfig tc;
  tc.model = cfg_.model;
  tc.optimizer = cfg_.optimizer;
  tc.schedule = cfg_.schedule;
  tc.batch = cfg_.batch;
  tc.seed = cfg_.seed;
  tc.init_seed = cfg_.init_seed;
  tc.init = parse_init_scheme(cfg_.init);
  tc.backend = backend;
  const std::uint64_t steps_per_epoch = (shard->rows + cfg_.batch - 1) / cfg_.batch;
  if (schedule_decays(tc.schedule.kind) && tc.schedule.total_steps == 0)
    tc.schedule.total_steps =
        cfg_.loop.steps ? cfg_.loop.steps : static_cast<std::uint64_t>(std::ceil(cfg_.loop.epochs * steps_per_epoch));
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

  // The network and the loop: listening from here on.
  // The flags are bound to LoopSettings' own fields (config.cpp); what is left is the one
  // decision that depends on how this peer starts.
  LoopSettings ls = cfg_.loop;
  ls.train_set_rows = train_set_rows;
  // A resumed peer continues from its own saved model; peers starting a swarm together
  // (--min-peers) share their initialisation, so neither fetches the swarm's state.
  ls.gossip.fetch_state = !cfg_.resume && cfg_.loop.min_peers <= 1;
  RuntimeOptions ro;
  ro.listen = cfg_.listen;
  ro.join = cfg_.join;
  ro.fingerprint = trainer.model().fingerprint();
  ro.param_count = trainer.model().param_count();
  ro.swarm_key = swarm_key;
  ro.tls_cert = cfg_.tls_cert;
  ro.tls_key = cfg_.tls_key;
  ro.tls_ca = cfg_.tls_ca;
  ro.seed = cfg_.seed;
  ro.device = trainer.backend().name();
  ro.metrics_listen = cfg_.metrics_listen;
  ro.name = cfg_.name;
  Runtime rt(ro, ls, trainer, metrics, log_);
  // Whatever Gossip handles may mix into, or replace, trainer.params(); on a device that is a
  // host mirror, so the trainer is told (it uploads before its next use; a no-op on the CPU).
  rt.on_params_written = [&trainer] { trainer.params_written(); };
  const PeerId self_id = rt.id();
  // The I/O thread (started above at normal priority) must not queue behind training on a
  // busy machine: lower this compute thread's priority a little, so a wake-up of the I/O thread
  // preempts it promptly. Exchange round trips fall several-fold when peers share cores.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 5) != 0)
    log_->debug("could not lower the compute thread's priority");
  if (swarm_key.empty() && cfg_.tls_ca.empty())
    log_->warn("swarm is open: anyone who can reach {} can join (use --swarm-key)", self_id);
  else
    log_->info("trust: {}{}", swarm_key.empty() ? "" : "swarm key required (HMAC-SHA256 challenge-response)",
               cfg_.tls_ca.empty() ? "" : fmt::format("{}TLS 1.3, certificates signed by {}", swarm_key.empty() ? "" : "; ",
                                                      cfg_.tls_ca));
  log_->info("gossip: every {} local step(s), codec {}, staleness {}, mix weight {}{}",
             cfg_.loop.gossip.local_steps ? std::to_string(cfg_.loop.gossip.local_steps)
                                          : fmt::format("auto (exchange share {:g})", cfg_.loop.gossip.exchange_share),
             codec_name(cfg_.loop.gossip.codec), bounded_str(cfg_.loop.gossip.staleness),
             cfg_.loop.gossip.mix_weight == MixWeight::Samples ? "samples" : "uniform",
             cfg_.throttle > 1 ? fmt::format(", throttled {}x", cfg_.throttle) : std::string());
  if (cfg_.loop.gossip.robust.enabled)
    log_->info("robust mixing: models beyond {} typical distances are clipped, beyond {} refused", cfg_.loop.gossip.robust.clip_factor,
               cfg_.loop.gossip.robust.refuse_factor > 0 ? fmt::format("{}", cfg_.loop.gossip.robust.refuse_factor) : std::string("never"));
  if (cfg_.loop.min_peers > 1)
    log_->info("waiting for {} peers before training (up to {:.0f} s)", cfg_.loop.min_peers, cfg_.loop.min_peers_timeout_s);
  rt.start(resume_view);

  PeerLoop& loop = rt.loop();
  const bool follow_swarm = loop.settings().swarm_samples > 0 && schedule_decays(cfg_.schedule.kind);
  double lr_factor = 1.0;  // PeerLoop::lr_scale, as last applied
  if (loop.settings().swarm_samples)
    log_->info("swarm-wide budget: every peer stops when the swarm has processed {} samples{}{}", loop.settings().swarm_samples,
               follow_swarm ? "; the learning-rate schedule follows the swarm's progress" : "",
               loop.settings().epochs > 0 || loop.settings().steps
                   ? " (or at this peer's own --epochs/--steps, whichever comes first: drop those to share the work by speed)"
                   : "");
  Gossip& gossip = rt.gossip();
  const bool bounded = std::isfinite(cfg_.loop.gossip.staleness);
  auto evaluate = [&](const char* why) {
    const EvalResult r = trainer.evaluate(task.test);
    rt.report_eval(trainer.steps(), trainer.epochs_done(), r.loss, r.accuracy, why);
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

  // The driver of core's PeerLoop with real time (core/peer_loop.hpp has the contract): the
  // runtime carries out the Waits, this the training steps and the evaluations.
  int rc = 0;
  for (bool running = true; running;) {
    const LoopAction a = rt.next_action(INFINITY, &stop_);
    switch (a.kind) {
      case LoopAction::Kind::Step: {
        if (bounded) {
          const auto slowest = gossip.slowest_clock();
          metrics.write("step", {{"clock", trainer.steps()}, {"slowest", slowest},
                                 {"gap", static_cast<std::int64_t>(trainer.steps()) - static_cast<std::int64_t>(slowest)},
                                 {"peers", gossip.view().live_count() + 1}});
        }
        // A swarm-wide budget: a decaying schedule without its own --lr-total-steps anneals with
        // the swarm's progress, so a slow peer decays with the others rather than by its steps.
        if (follow_swarm) trainer.follow_progress(loop.swarm_progress());
        if (const double f = loop.lr_scale(); f != lr_factor) {
          log_->info("learning rate x{:.3g}: {} peer(s) training now, of the {} seen (--lr-follows-peers)", f,
                     loop.gossip().view().live_trainers() + 1,
                     static_cast<long>(std::lround(static_cast<double>(loop.gossip().view().live_trainers() + 1) / f)));
          lr_factor = f;
          trainer.scale_lr(f);
        }
        const auto t0 = Clock::now();
        const double loss = trainer.compute_gradient();
        rt.drain();  // answer exchanges that arrived during forward/backward without waiting a step
        trainer.apply_gradient();
        double dt = seconds_since(t0);
        if (cfg_.throttle > 1.0) {  // emulate a slower machine: stretch the step, handling messages meanwhile
          rt.sleep_for(dt * (cfg_.throttle - 1.0));
          dt = seconds_since(t0);
        }
        rt.step_done(loss, dt, cfg_.batch);
        if (!cfg_.checkpoint_dir.empty() && seconds_since(last_checkpoint) >= cfg_.checkpoint_every_s) {
          save_checkpoint();
          last_checkpoint = Clock::now();
        }
        break;
      }
      case LoopAction::Kind::Wait:  // only at the deadline, which is never
        break;
      case LoopAction::Kind::Evaluate:
        if (a.final && !cfg_.checkpoint_dir.empty()) save_checkpoint();
        evaluate(a.final ? " (final)" : "");
        break;
      case LoopAction::Kind::Exit:
        rc = a.exit_code;
        running = false;
        break;
    }
  }
  rt.finish();
  if (!cfg_.save_params_path.empty()) save_params(cfg_.save_params_path, trainer.params());
  return rc;
}

}  // namespace rumor::peer
