// The simulator's engine, its Env and the peer life cycle (see simulator.hpp for the model).
//
// Layout of this file: SimEnv (the seam: core/env.hpp with virtual time), the per-peer state,
// then Impl in the order a peer lives: start, steps and boundaries, settle, exit, churn, the
// network hand-over, sampling and the outputs.
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/check.hpp"
#include "core/mix.hpp"
#include "core/peer_loop.hpp"
#include "core/model.hpp"
#include "sim/event_queue.hpp"
#include "sim/network.hpp"
#include "sim/streams.hpp"
#include "sim/topology.hpp"
#include "sim/workload.hpp"

namespace rumor::sim {

bool aligned_heap();  // sim/aligned_new.cpp: makes runs independent of allocation history

const char* peer_state_name(PeerState s) {
  switch (s) {
    case PeerState::Pending: return "pending";
    case PeerState::Training: return "training";
    case PeerState::Settling: return "settling";
    case PeerState::Done: return "done";
    case PeerState::Crashed: return "crashed";
    case PeerState::Left: return "left";
  }
  return "?";
}

namespace {

// A peer's loop settings from the scenario (docs/sim.md names the keys after rumor-peer's flags).
LoopSettings loop_settings(const Scenario& s) {
  LoopSettings ls;
  GossipConfig& gc = ls.gossip;
  gc.local_steps = s.local_steps;
  gc.mix_weight = s.mix_samples ? MixWeight::Samples : MixWeight::Uniform;
  gc.max_in_flight = s.max_in_flight;
  gc.exchange_timeout_s = s.exchange_timeout;
  gc.failure_backoff_s = s.failure_backoff;
  gc.suspect_after_failures = s.suspect_after;
  gc.suspect_timeout_s = s.suspect_timeout;
  gc.join_retry_s = s.join_retry;
  gc.digest_limit = s.digest_limit;
  gc.staleness = s.staleness;
  gc.codec = s.codec;
  gc.topk_fraction = s.topk_fraction;
  gc.probe_interval_s = s.probe_interval;
  gc.probe_timeout_s = s.probe_timeout;
  gc.stream_exchanges = s.stream_exchanges;
  gc.state_timeout_s = s.state_timeout;
  gc.leave_timeout_s = s.leave_timeout;
  ls.steps = s.steps;
  ls.epochs = s.training ? s.epochs : 0;
  ls.duration_s = s.peer_duration;
  ls.evaluate = s.peer_evals;
  ls.eval_every = s.eval_every_steps;
  ls.state_wait_s = s.state_wait;
  ls.leave_wait_s = s.leave_wait;
  ls.settle_s = s.settle;
  ls.settle_max_s = s.settle_max;
  return ls;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();


std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

// "p17" -> 17; anything else -> -1.
std::int64_t peer_index(const PeerId& id) {
  if (id.size() < 2 || id[0] != 'p') return -1;
  std::int64_t x = 0;
  for (std::size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9' || x > (1ll << 40)) return -1;
    x = x * 10 + (id[i] - '0');
  }
  return x;
}

PeerId peer_id(std::uint32_t i) { return "p" + std::to_string(i); }

struct Input {
  enum class Kind : std::uint8_t { Message, Timer, SendFailed } kind;
  std::uint32_t other;  // SendFailed: the target
  std::uint64_t arg;    // Message: slab index; Timer: id
};

struct Slot {
  Message msg;
  std::uint32_t from = 0, to = 0, from_life = 0, to_life = 0;
  std::uint64_t bytes = 0;
};

}  // namespace

class SimEnv;

// What the loop (core/peer_loop.hpp) sees of a simulated peer: its model, or with training off
// (averaging studies) its parameters and a clock of idle ticks.
class SimLoopModel final : public LoopModel {
 public:
  SimLoopModel(PeerModel& m, bool training) : m_(m), training_(training) {}
  std::span<float> params() override { return m_.params(); }
  std::uint64_t steps() const override { return training_ ? m_.steps() : ticks; }
  std::uint64_t samples() const override { return training_ ? m_.samples() : ticks; }
  double epochs_done() const override { return training_ ? m_.epochs_done() : 0.0; }
  void adopt_step(std::uint64_t step) override {
    if (training_) m_.adopt_step(step);
  }
  std::uint64_t ticks = 0;  // training off: averaging ticks done

 private:
  PeerModel& m_;
  bool training_;
};

struct Peer {
  std::uint32_t index = 0;
  PeerId id;
  std::uint32_t cls = 0;
  PeerState state = PeerState::Pending;
  std::uint32_t life = 0;
  bool exists = false;          // created at least once (founder, or its join happened)
  bool busy = false;            // in a step or an evaluation pause: inputs wait in `inbox`
  bool begun = false;           // open_peer done, begin_peer done
  bool waiting = false;         // its loop said Wait: it sleeps until an input or `wait_until`
  bool stepping = false;        // a Step is in progress (with training off: a tick is due)
  bool skip_drain = false;      // after the final evaluation: exit without handling more inputs
  double wait_until = -1;       // the WaitTick event set for the current wait
  std::uint64_t wait_iter = 0, step_iter = 0;  // void earlier WaitTick / Tick events
  std::uint32_t cpu = 0;  // its scheduler weight in Impl::cpu_weight (compute.shared_cores)
  bool active = false;    // counted in Impl::active: loading or running
  std::vector<Input> inbox;
  std::unique_ptr<SimEnv> env;
  std::unique_ptr<PeerModel> model;
  std::unique_ptr<SimLoopModel> side;
  std::unique_ptr<PeerLoop> loop;
  Rng compute_rng;
  std::vector<std::uint32_t> stragglers;  // indices of the straggler lines that name it
  double started_at = 0, step_end_at = 0, step_seconds = 0, pending_cpu = 0, last_loss = 0;
  std::uint64_t bytes_sent = 0, bytes_recv = 0;
  double final_acc = kNaN, final_loss = kNaN;

  bool running() const { return state == PeerState::Training || state == PeerState::Settling; }
  Gossip* gossip() const { return loop ? &loop->gossip() : nullptr; }
};

struct Simulation::Impl {
  Scenario s;
  std::unique_ptr<Workload> work;
  std::unique_ptr<Network> net;
  EventQueue q;
  double now = 0;
  std::vector<Peer> peers;
  std::vector<Slot> slots;
  std::vector<std::uint32_t> free_slots;
  std::vector<Input> scratch;
  Rng churn_rng;
  Totals totals;
  std::vector<Sample> samples;
  std::uint64_t next_sample = 0;  // index k of the next sample time k * sample_every
  std::string events;
  bool ended = false;
  // compute.shared_cores: the Linux scheduler's weights of what runs now. rumor-peer's compute
  // thread runs at nice 5 (weight 335); a peer still loading its data is at nice 0 (1024).
  static constexpr std::uint32_t kTrainWeight = 335, kLoadWeight = 1024;
  std::uint64_t cpu_weight = 0;
  // The run is over (without run.duration) once no peer is loading or running and no churn is
  // to come: events left then are void (timers of exited peers) and must not stretch it.
  std::uint32_t active = 0;
  std::size_t churn_left = 0;
  std::vector<double> xbar;  // sampling scratch
  std::vector<float> xbar_f;

  explicit Impl(const Scenario& sc);
  void schedule(double t, EventKind k, std::uint32_t peer, std::uint32_t life, std::uint64_t arg = 0) {
    Event e;
    e.t = t;
    e.kind = k;
    e.peer = peer;
    e.life = life;
    e.arg = arg;
    q.push(e);
  }
  void log(const Peer& p, const char* event, const std::string& other, std::uint64_t clock, double value,
           const std::string& detail) {
    events += format("%.6f,%s,%s,%s,%llu,%.9g,", now, p.id.c_str(), event, other.c_str(),
                     static_cast<unsigned long long>(clock), value);
    events += csv_quote(detail);
    events += '\n';
  }
  std::uint64_t peer_steps(const Peer& p) const {
    if (!p.model) return 0;
    return p.side ? p.side->steps() : 0;
  }
  std::uint64_t peer_exchanges(const Peer& p) const {
    return p.loop ? p.loop->exchanges() : 0;
  }

  // ---- life cycle ----
  void open_peer(Peer& p);
  void begin_peer(Peer& p);
  std::vector<PeerId> seeds_for(const Peer& p);
  void act(Peer& p);
  void begin_step(Peer& p);
  void step_mid(Peer& p);
  void step_end(Peer& p);
  void tick(Peer& p);
  double draw_step(Peer& p);
  void peer_eval(Peer& p);
  void pause(Peer& p);
  void exit_peer(Peer& p);
  void drop_process(Peer& p);
  void update_cpu(Peer& p);
  // How much longer a computation of a training peer takes than alone: the cores are shared
  // in proportion to weight (CFS), so its share is cores * 335 / sum of weights, at most 1.
  double cpu_factor() const {
    if (s.shared_cores <= 0) return 1.0;
    return std::max(1.0, static_cast<double>(cpu_weight) / (kTrainWeight * s.shared_cores));
  }
  // ---- inputs ----
  void offer(Peer& p, Input in);
  void handle(Peer& p, const Input& in);
  void drain(Peer& p);
  void release_inbox(Peer& p);
  std::uint32_t put_slot(Slot&& sl);
  void free_slot(std::uint64_t i);
  void send(std::uint32_t from, const PeerId& to, Message msg);
  void deliver(const Event& e);
  void protocol_event(std::uint32_t peer, const ProtocolEvent& e);
  // ---- churn ----
  void churn(const ChurnAction& a);
  void apply_churn(const ChurnAction& a, Peer& p);
  // ---- engine ----
  void process(const Event& e);
  void dispatch(const Event& e, Peer& p);
  enum class Progress { Sample, Event, Limit, Over };
  Progress advance_once(double limit);
  bool advance(double limit);
  Simulation* owner = nullptr;
  std::function<void(const Simulation&)> after_event;
  void record_sample(double t);
  Sample compute_sample(double t);
  double end_time() const { return s.duration > 0 ? s.duration : std::numeric_limits<double>::infinity(); }
  double sample_time(std::uint64_t k) const { return static_cast<double>(k) * s.sample_every; }
};

// The Env of one simulated peer (one life of it): virtual time, the simulated network, timers
// as events, and its own random stream.
class SimEnv final : public Env {
 public:
  SimEnv(Simulation::Impl& w, std::uint32_t peer, std::uint32_t life, Rng rng)
      : w_(w), peer_(peer), life_(life), rng_(rng) {}
  double now() const override { return w_.now; }
  void send(const PeerId& to, Message msg) override { w_.send(peer_, to, std::move(msg)); }
  void set_timer(double delay_s, std::uint64_t id) override {
    w_.schedule(w_.now + std::max(delay_s, 0.0), EventKind::Timer, peer_, life_, id);
  }
  void disconnect(const PeerId&) override {}  // connections are not modelled
  Rng& rng() override { return rng_; }
  void event(const ProtocolEvent& e) override { w_.protocol_event(peer_, e); }

 private:
  Simulation::Impl& w_;
  std::uint32_t peer_, life_;
  Rng rng_;
};

Simulation::Impl::Impl(const Scenario& sc) : s(sc), churn_rng(Rng(sc.seed).fork(streams::kChurn)) {
  RUMOR_CHECK(aligned_heap());
  // Eigen's own threads would make the sums' order depend on timing. Only written when it
  // differs: sweeps construct simulations on two threads at once (run_sweep sets it first).
  if (math_threads() != 1) set_math_threads(1);
  // Stop rules: rumor-peer's default of 5 epochs when nothing else is said.
  const bool told = s.steps || s.epochs > 0 || s.peer_duration > 0;
  if (!told && s.duration <= 0) {
    if (s.workload == WorkloadKind::Model && s.training)
      s.epochs = 5;
    else
      throw ScenarioError(s.source + ": workload: say when peers stop: workload.steps, workload.duration or run.duration");
  }
  work = std::make_unique<Workload>(s, s.total_ids);
  std::vector<std::uint32_t> class_of(s.total_ids, 0);
  std::uint32_t id = 0;
  for (std::uint32_t c = 0; c < s.classes.size(); ++c)
    for (std::uint32_t k = 0; k < s.classes[c].count; ++k) class_of[id++] = c;
  for (const auto& a : s.churn)
    if (a.kind == ChurnAction::Kind::Join && a.peer >= static_cast<std::int64_t>(s.founders))
      class_of[static_cast<std::size_t>(a.peer)] = a.cls;
  net = std::make_unique<Network>(s, class_of, Rng(s.seed).fork(streams::kNetwork));
  peers.resize(s.total_ids);
  const Rng root(s.seed);
  for (std::uint32_t i = 0; i < s.total_ids; ++i) {
    Peer& p = peers[i];
    p.index = i;
    p.id = peer_id(i);
    p.cls = class_of[i];
  }
  // Stragglers: explicit sets, or a fraction of the founders drawn from the seed.
  for (std::size_t k = 0; k < s.stragglers.size(); ++k) {
    StragglerSpec& st = s.stragglers[k];
    if (st.fraction >= 0) {
      std::vector<std::uint32_t> f(s.founders);
      for (std::uint32_t i = 0; i < s.founders; ++i) f[i] = i;
      Rng r = root.fork(streams::kStragglers).fork(k);
      r.shuffle(f);
      f.resize(static_cast<std::size_t>(std::llround(st.fraction * s.founders)));
      std::sort(f.begin(), f.end());
      st.who = f;
    }
    for (auto i : st.who) peers[i].stragglers.push_back(static_cast<std::uint32_t>(k));
  }
  // Founders that start at 0 all listen before any of them sends its first JoinRequest, as
  // if they had been started a moment apart and had waited for each other.
  for (std::uint32_t i = 0; i < s.founders; ++i) {
    peers[i].exists = true;
    if (s.classes[peers[i].cls].start <= 0) open_peer(peers[i]);
    schedule(s.classes[peers[i].cls].start, EventKind::Start, i, 0);
  }
  for (std::size_t k = 0; k < s.churn.size(); ++k) schedule(s.churn[k].at, EventKind::Churn, 0, 0, k);
  churn_left = s.churn.size();
  for (Peer& p : peers) update_cpu(p);
  xbar.resize(work->param_count());
}

// ---------------------------------------------------------------- life cycle

std::vector<PeerId> Simulation::Impl::seeds_for(const Peer& p) {
  std::vector<PeerId> out;
  const bool founder_start = p.index < s.founders && p.life == 0;
  const auto add = [&](std::uint32_t j) {
    if (j != p.index) out.push_back(peers[j].id);
  };
  if (founder_start) {
    switch (s.bootstrap) {
      case Bootstrap::Seed: add(0); break;
      case Bootstrap::All:
        for (std::uint32_t j = 0; j < s.founders; ++j) add(j);
        break;
      case Bootstrap::Neighbours: {
        const auto nb = topology_neighbours(s.topology, p.index, s.total_ids);
        for (auto j : nb)
          if (j < s.founders) add(j);
        if (nb.empty()) add(0);
        break;
      }
    }
    return out;
  }
  // A later join: through live members only (a user gives --join addresses that answer).
  std::vector<std::uint32_t> live;
  for (const Peer& q2 : peers)
    if (q2.running() && q2.index != p.index) live.push_back(q2.index);
  if (live.empty()) return out;
  if (s.bootstrap == Bootstrap::All) {
    for (auto j : live) add(j);
    return out;
  }
  if (s.bootstrap == Bootstrap::Neighbours) {
    for (auto j : topology_neighbours(s.topology, p.index, s.total_ids))
      if (peers[j].running()) add(j);
    if (!out.empty()) return out;
  }
  if (s.bootstrap == Bootstrap::Seed && peers[0].running() && p.index != 0) {
    add(0);
    return out;
  }
  for (int k = 0; k < 3 && !live.empty(); ++k) {
    const std::size_t pick = churn_rng.below(live.size());
    add(live[pick]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return out;
}

// The process is up: model, Env and protocol exist and connections are accepted (inputs wait
// until begin_peer, as they wait in the daemon's inbox before its loop runs).
void Simulation::Impl::open_peer(Peer& p) {
  RUMOR_CHECK(p.state == PeerState::Pending && p.exists);
  p.state = PeerState::Training;
  p.started_at = now;
  p.busy = true;
  p.begun = false;
  p.waiting = false;
  p.stepping = false;
  p.skip_drain = false;
  p.wait_until = -1;
  p.pending_cpu = 0;
  const Rng root(s.seed);
  p.compute_rng = root.fork(streams::kComputeBase + p.index).fork(p.life);
  p.model = work->make_peer(p.index, p.life);
  p.side = std::make_unique<SimLoopModel>(*p.model, s.training);
  p.env = std::make_unique<SimEnv>(*this, p.index, p.life, p.life == 0 ? root.fork(p.index) : root.fork(p.index).fork(p.life));
  LoopSettings ls = loop_settings(s);
  // Founders started together through `all` or `neighbours` are one swarm from the start: none
  // has a model the others lack, so none fetches one (with `seed` they join p0 as rumor-peer
  // --join does, and learn from it that there is nothing to fetch yet).
  ls.gossip.fetch_state = s.fetch_state && !(p.index < s.founders && p.life == 0 && s.bootstrap != Bootstrap::Seed);
  for (auto j : topology_neighbours(s.topology, p.index, s.total_ids)) ls.gossip.neighbours.push_back(peers[j].id);
  // The incarnation is the life: a restarted peer outranks its tombstone in every view (the
  // daemon uses wall-clock milliseconds for the same effect).
  p.loop = std::make_unique<PeerLoop>(*p.env, ls, MemberDigest{p.id, p.life, MemberState::Alive, 0},
                                      work->fingerprint(), *p.side);
}

// PeerLoop::start(seeds), then whatever the loop says.
void Simulation::Impl::begin_peer(Peer& p) {
  p.begun = true;
  const auto seeds = seeds_for(p);
  std::string seed_list;
  for (const auto& x : seeds) seed_list += (seed_list.empty() ? "" : " ") + x;
  if (seeds.size() > 4) seed_list = std::to_string(seeds.size()) + " seeds";
  log(p, "start", "", p.life, 0, seed_list);
  p.loop->start(seeds);
  act(p);
}

// The simulator's driver of core's PeerLoop: carries out what it says next. Inputs that
// arrived during a step or an evaluation are handed over first (the daemon's drain at the
// top of its loop); an idle peer handles its inputs as they come (offer).
void Simulation::Impl::act(Peer& p) {
  if (!p.skip_drain) drain(p);
  p.skip_drain = false;
  const LoopAction a = p.loop->next();
  p.waiting = false;
  if (p.loop->phase() == LoopPhase::Settling && p.state == PeerState::Training) {
    p.state = PeerState::Settling;
    log(p, "settle", "", peer_steps(p), 0, "");
  }
  switch (a.kind) {
    case LoopAction::Kind::Step:
      return begin_step(p);
    case LoopAction::Kind::Evaluate:
      peer_eval(p);
      p.skip_drain = a.final;  // the daemon leaves right after its final evaluation
      return pause(p);
    case LoopAction::Kind::Wait: {
      // Woken by an input (offer) or at `until`: one event there, unless one is already set.
      p.busy = false;
      p.waiting = true;
      const double t = std::max(a.until, now);
      if (t != p.wait_until) {
        p.wait_until = t;
        schedule(t, EventKind::WaitTick, p.index, p.life, ++p.wait_iter);
      }
      return;
    }
    case LoopAction::Kind::Exit:
      return exit_peer(p);
  }
}

double Simulation::Impl::draw_step(Peer& p) {
  const PeerClass& c = s.classes[p.cls];
  double m = c.step_time;
  for (auto k : p.stragglers) {
    const StragglerSpec& st = s.stragglers[k];
    if (now >= st.at && (st.until < 0 || now < st.until)) m *= st.factor;
  }
  switch (c.dist) {
    case StepDist::Constant: return m;
    case StepDist::Normal: return m * std::max(0.05, 1.0 + c.sd * p.compute_rng.normal());
    case StepDist::Lognormal: return m * std::exp(c.sd * p.compute_rng.normal() - 0.5 * c.sd * c.sd);
    case StepDist::Exponential: return m * p.compute_rng.exponential(1.0);
  }
  return m;
}

// A step: its math at the mid-step boundary, inputs held until its end. With training off
// (averaging studies) a "step" is an idle tick of the same length, inputs handled as they come.
void Simulation::Impl::begin_step(Peer& p) {
  p.stepping = true;
  if (!s.training) {
    p.busy = false;
    p.step_seconds = draw_step(p);
    schedule(now + p.step_seconds, EventKind::Tick, p.index, p.life, ++p.step_iter);
    return;
  }
  p.busy = true;
  const double d = (draw_step(p) + p.pending_cpu) * cpu_factor();
  p.pending_cpu = 0;
  p.step_seconds = d;
  p.step_end_at = now + d;
  schedule(now + s.mid_fraction * d, EventKind::StepMid, p.index, p.life);
}

void Simulation::Impl::step_mid(Peer& p) {
  p.last_loss = p.model->compute_gradient();
  drain(p);  // the daemon answers exchanges between forward/backward and the optimizer step
  schedule(std::max(p.step_end_at, now), EventKind::StepEnd, p.index, p.life);
}

void Simulation::Impl::step_end(Peer& p) {
  p.model->apply_gradient();
  ++totals.steps;
  p.stepping = false;
  p.loop->step_done(p.last_loss, p.step_seconds, 0);
  act(p);
}

void Simulation::Impl::tick(Peer& p) {
  ++p.side->ticks;
  p.stepping = false;
  p.loop->step_done(0, 0, 0);  // ticks are not training: settling keeps its 2 ms pace
  act(p);
}

void Simulation::Impl::peer_eval(Peer& p) {
  const EvalResult r = work->evaluate(p.model->params());
  p.final_acc = r.accuracy;
  p.final_loss = r.loss;
  log(p, "eval", "", peer_steps(p), r.accuracy, format("loss=%.6f epoch=%.4f", r.loss, s.training ? p.model->epochs_done() : 0.0));
}

// An evaluation holds the peer (inputs wait) for the class's eval_time.
void Simulation::Impl::pause(Peer& p) {
  p.busy = true;
  update_cpu(p);
  schedule(now + s.classes[p.cls].eval_time * cpu_factor(), EventKind::Resume, p.index, p.life);
}

void Simulation::Impl::exit_peer(Peer& p) {
  const bool left = p.loop->stop_requested();
  const std::uint64_t st = peer_steps(p);
  const double began = p.loop->stats().training_started;
  p.state = left ? PeerState::Left : PeerState::Done;
  if (left) ++totals.leaves;
  log(p, left ? "left" : "done", "", st, now - (began >= 0 ? began : p.started_at),
      s.peer_evals ? format("test_acc=%.6f loss=%.6f", p.final_acc, p.final_loss) : std::string());
  drop_process(p);
  if (left) {  // a peer that left takes its model with it
    p.side.reset();
    p.model.reset();
  }
}

// The process is gone: its inputs, loop, protocol and Env go with it (the model, and what the
// loop saw of it, stay for Done).
void Simulation::Impl::drop_process(Peer& p) {
  release_inbox(p);
  p.busy = false;
  p.waiting = false;
  p.stepping = false;
  p.loop.reset();
  p.env.reset();
}

// Whether the peer uses a core now, and at which weight: loading its data (nice 0); training,
// evaluating or settling (its compute thread, nice 5: a settling peer exchanges back to back).
// Waiting peers sleep. Looked at after every event that may have changed it.
void Simulation::Impl::update_cpu(Peer& p) {
  std::uint32_t w = 0;
  if (s.training && p.exists) {
    if (p.state == PeerState::Pending) w = kLoadWeight;
    else if (p.running() && (!p.waiting || p.state == PeerState::Settling)) w = kTrainWeight;
  }
  cpu_weight = cpu_weight + w - p.cpu;
  p.cpu = w;
  const bool a = p.exists && (p.state == PeerState::Pending || p.running());
  if (a != p.active) {
    p.active = a;
    if (a) ++active; else --active;
  }
}

// ---------------------------------------------------------------- inputs

void Simulation::Impl::offer(Peer& p, Input in) {
  if (p.busy) {
    p.inbox.push_back(in);
    return;
  }
  handle(p, in);
  if (p.busy || !p.running()) return;
  if (p.waiting) act(p);
}

void Simulation::Impl::handle(Peer& p, const Input& in) {
  switch (in.kind) {
    case Input::Kind::Message: {
      // Move the message out first: the handler sends, which may grow the slab.
      const std::uint32_t from = slots[in.arg].from;
      const Message m = std::move(slots[in.arg].msg);
      free_slot(in.arg);
      if (m.payload) p.pending_cpu += s.classes[p.cls].exchange_cpu;
      p.gossip()->on_message(peers[from].id, m);
      break;
    }
    case Input::Kind::Timer:
      p.gossip()->on_timer(in.arg);
      break;
    case Input::Kind::SendFailed:
      p.gossip()->on_send_failed(peers[in.other].id, "connection refused");
      break;
  }
}

void Simulation::Impl::drain(Peer& p) {
  while (!p.inbox.empty()) {
    scratch.clear();
    scratch.swap(p.inbox);
    for (const Input& in : scratch) handle(p, in);
  }
  // Keep the larger (now empty) buffer with the peer: its inbox refills without allocating.
  scratch.clear();
  if (p.inbox.capacity() < scratch.capacity()) p.inbox.swap(scratch);
}

void Simulation::Impl::release_inbox(Peer& p) {
  for (const Input& in : p.inbox)
    if (in.kind == Input::Kind::Message) free_slot(in.arg);
  p.inbox.clear();
  p.inbox.shrink_to_fit();
}

std::uint32_t Simulation::Impl::put_slot(Slot&& sl) {
  if (free_slots.empty()) {
    slots.push_back(std::move(sl));
    return static_cast<std::uint32_t>(slots.size() - 1);
  }
  const std::uint32_t i = free_slots.back();
  free_slots.pop_back();
  slots[i] = std::move(sl);
  return i;
}

void Simulation::Impl::free_slot(std::uint64_t i) {
  slots[i].msg = Message{};
  free_slots.push_back(static_cast<std::uint32_t>(i));
}

void Simulation::Impl::send(std::uint32_t from, const PeerId& to_id, Message msg) {
  Peer& f = peers[from];
  ++totals.messages;
  const std::int64_t to = peer_index(to_id);
  if (to < 0 || to >= static_cast<std::int64_t>(peers.size()) || to == from) {
    ++totals.dropped;  // no such address: nobody answers
    return;
  }
  Peer& t = peers[static_cast<std::size_t>(to)];
  const auto ti = static_cast<std::uint32_t>(to);
  if (!t.running()) {
    // Nothing listens there (not started yet, exited, crashed): the connect is refused.
    ++totals.refused;
    schedule(now + net->refused_after(from, ti), EventKind::SendFailed, from, f.life, ti);
    return;
  }
  if (net->partitioned(from, ti, now)) {
    ++totals.dropped;
    return;
  }
  const std::uint64_t bytes = 32 + msg.header.size() + msg.payload_size();
  f.bytes_sent += bytes;
  totals.bytes += bytes;
  if (msg.payload) f.pending_cpu += s.classes[f.cls].exchange_cpu;
  const double at = net->transmit(from, ti, bytes, now);
  if (at < 0) {
    ++totals.dropped;
    return;
  }
  Slot sl;
  sl.msg = std::move(msg);
  sl.from = from;
  sl.to = ti;
  sl.from_life = f.life;
  sl.to_life = t.life;
  sl.bytes = bytes;
  schedule(at, EventKind::Deliver, ti, t.life, put_slot(std::move(sl)));
}

void Simulation::Impl::deliver(const Event& e) {
  Peer& t = peers[e.peer];
  const Slot& sl = slots[e.arg];
  const std::uint32_t from = sl.from, from_life = sl.from_life;
  if (net->partitioned(from, e.peer, now)) {
    ++totals.dropped;
    free_slot(e.arg);
    return;
  }
  if (!t.running() || t.life != sl.to_life) {
    // It died while the message was on its way: the connection is reset.
    ++totals.refused;
    free_slot(e.arg);
    schedule(now + net->latency(e.peer, from), EventKind::SendFailed, from, from_life, e.peer);
    return;
  }
  t.bytes_recv += sl.bytes;
  offer(t, {Input::Kind::Message, from, e.arg});
}

void Simulation::Impl::protocol_event(std::uint32_t peer, const ProtocolEvent& e) {
  using K = ProtocolEvent::Kind;
  const Peer& p = peers[peer];
  switch (e.kind) {
    case K::ExchangeDone:
      if (e.reason == "initiator") ++totals.exchanges; else ++totals.answered;
      if (s.log_exchanges) log(p, "exchange", e.peer, e.clock, e.distance, format("%s rtt=%.6f peer_clock=%llu", e.reason.c_str(), e.seconds, static_cast<unsigned long long>(e.other)));
      break;
    case K::ExchangeFailed:
      ++totals.failed;
      log(p, "exchange_failed", e.peer, e.clock, 0, e.reason);
      break;
    case K::ExchangeDeclined:
      ++totals.declined;
      if (s.log_exchanges) log(p, "exchange_declined", e.peer, e.clock, 0, e.reason);
      break;
    case K::Rejected:
      ++totals.rejected;
      log(p, "rejected", e.peer, e.clock, 0, e.reason);
      break;
    case K::Joined: log(p, "joined", e.peer, e.clock, 0, ""); break;
    case K::Join:
      if (s.log_views) log(p, "view_join", e.peer, e.clock, 0, "");
      break;
    case K::Leave: log(p, "view_leave", e.peer, e.clock, 0, ""); break;
    case K::Dead: log(p, "view_dead", e.peer, e.clock, 0, ""); break;
    case K::Suspect: log(p, "view_suspect", e.peer, e.clock, 0, ""); break;
    case K::Wait: log(p, "wait", e.peer, e.clock, e.seconds, format("slowest=%llu", static_cast<unsigned long long>(e.other))); break;
    case K::StateReceived: log(p, "state_received", e.peer, e.other, 0, e.reason); break;
    case K::StateFailed: log(p, "state_failed", e.peer, e.clock, 0, e.reason); break;
    case K::Handover: log(p, "handover", e.peer, e.other, e.distance, e.reason); break;
    case K::JoinFailed: log(p, "join_failed", "", e.clock, e.seconds, e.reason); break;
    case K::Founded: log(p, "founded", "", e.clock, e.seconds, ""); break;
    case K::PeersInView: log(p, "peers_in_view", "", e.clock, static_cast<double>(e.other), e.reason); break;
    case K::Training:
      if (!e.reason.empty()) log(p, "state_wait_over", "", e.clock, e.seconds, "no model from the swarm (" + e.reason + "): training from our own initialisation");
      break;
    case K::Diverged: log(p, "diverged", "", e.clock, std::stod(e.reason), "training diverged (loss not finite): lower workload.lr"); break;
    case K::Settled: log(p, "settled", "", e.clock, e.distance, format("exchanges=%llu seconds=%.6f", static_cast<unsigned long long>(e.other), e.seconds)); break;
    case K::Departed: log(p, "departed", "", e.clock, e.seconds, e.reason); break;
  }
}

// ---------------------------------------------------------------- churn

void Simulation::Impl::churn(const ChurnAction& a) {
  std::int64_t who = a.peer;
  if (who < 0) {
    // A random victim among the peers that are training now.
    std::vector<std::uint32_t> c;
    for (const Peer& p : peers)
      if (p.state == PeerState::Training) c.push_back(p.index);
    if (c.empty()) return;
    who = c[churn_rng.below(c.size())];
  }
  Peer& p = peers[static_cast<std::size_t>(who)];
  apply_churn(a, p);
  update_cpu(p);
}

void Simulation::Impl::apply_churn(const ChurnAction& a, Peer& p) {
  using K = ChurnAction::Kind;
  switch (a.kind) {
    case K::Crash:
      if (!p.exists || !(p.running() || p.state == PeerState::Pending)) {
        log(p, "crash_ignored", "", 0, 0, std::string("not running (") + peer_state_name(p.state) + ")");
        return;
      }
      ++totals.crashes;
      log(p, "crash", "", peer_steps(p), 0, a.where);
      p.state = PeerState::Crashed;
      ++p.life;  // voids every event of the old process
      drop_process(p);
      p.side.reset();
      p.model.reset();
      return;
    case K::Leave:
      if (!p.exists || !(p.running() || p.state == PeerState::Pending)) {
        log(p, "leave_ignored", "", 0, 0, std::string("not running (") + peer_state_name(p.state) + ")");
        return;
      }
      log(p, "leave", "", peer_steps(p), 0, a.where);
      if (p.state == PeerState::Pending) {
        ++p.life;
        p.state = PeerState::Left;
        ++totals.leaves;
        return;
      }
      // What SIGTERM does to rumor-peer: the loop leaves at its next boundary.
      p.loop->request_stop();
      if (p.busy) return;  // in a step or an evaluation: at its end
      if (p.stepping) {    // training off: the tick in progress is dropped
        p.stepping = false;
        ++p.step_iter;
      }
      return act(p);
    case K::Join:
      if (p.exists && !(p.state == PeerState::Done || p.state == PeerState::Crashed || p.state == PeerState::Left)) {
        log(p, "join_ignored", "", 0, 0, std::string("already ") + peer_state_name(p.state));
        return;
      }
      ++totals.joins;
      if (p.exists) ++p.life;  // a restart: a new process, a new incarnation
      p.exists = true;
      p.state = PeerState::Pending;
      p.side.reset();
      p.model.reset();
      net->reset_peer(p.index);
      log(p, p.life ? "restart" : "join", "", 0, 0, a.where);
      schedule(now + s.classes[p.cls].start, EventKind::Start, p.index, p.life);
      return;
  }
}

// ---------------------------------------------------------------- engine

void Simulation::Impl::process(const Event& e) {
  RUMOR_CHECK(e.t >= now, "events must come in time order");
  now = e.t;
  ++totals.events;
  if (e.kind == EventKind::Churn) {
    --churn_left;
    return churn(s.churn[e.arg]);
  }
  Peer& p = peers[e.peer];
  dispatch(e, p);
  update_cpu(p);
}

void Simulation::Impl::dispatch(const Event& e, Peer& p) {
  if (e.kind == EventKind::Deliver) return deliver(e);
  if (e.life != p.life) return;  // an event of an earlier life
  switch (e.kind) {
    case EventKind::Start:
      if (p.state == PeerState::Pending) open_peer(p);
      if (p.state == PeerState::Training && !p.begun) begin_peer(p);
      break;
    case EventKind::StepMid:
      if (p.state == PeerState::Training) step_mid(p);
      break;
    case EventKind::StepEnd:
      if (p.state == PeerState::Training) step_end(p);
      break;
    case EventKind::Resume:
      if (p.running()) {
        p.busy = false;
        act(p);
      }
      break;
    case EventKind::Tick:
      if (p.running() && p.stepping && e.arg == p.step_iter) tick(p);
      break;
    case EventKind::WaitTick:
      if (p.running() && p.waiting && e.arg == p.wait_iter) {
        p.wait_until = -1;
        act(p);
      }
      break;
    case EventKind::Timer:
      if (p.running()) offer(p, {Input::Kind::Timer, 0, e.arg});
      break;
    case EventKind::SendFailed:
      if (p.running()) offer(p, {Input::Kind::SendFailed, static_cast<std::uint32_t>(e.arg), 0});
      break;
    case EventKind::Churn:
    case EventKind::Deliver:
      break;
  }
}

// One unit of progress up to `limit` (inclusive): a timeseries sample that is due, or one event.
Simulation::Impl::Progress Simulation::Impl::advance_once(double limit) {
  if (ended) return Progress::Over;
  const double end = end_time();
  const double ts = sample_time(next_sample);
  const bool over = !std::isfinite(end) && active == 0 && churn_left == 0;
  const bool have = !over && !q.empty() && q.top().t <= end;
  const double te = have ? q.top().t : std::numeric_limits<double>::infinity();
  if (ts <= end && ts < te && ts <= limit && (have || ts <= now)) {
    record_sample(ts);
    ++next_sample;
    return Progress::Sample;
  }
  if (have) {
    if (te > limit) return Progress::Limit;
    process(q.pop());
    if (after_event) after_event(*owner);
    return Progress::Event;
  }
  // Nothing is left before the end: a last sample at the end time (or the last event).
  const double t_end = std::isfinite(end) ? end : now;
  if (t_end > limit) return Progress::Limit;
  now = std::max(now, t_end);
  if (samples.empty() || samples.back().time < now - 1e-12) record_sample(now);
  ended = true;
  return Progress::Over;
}

// Processes events and samples up to `limit` (inclusive). False when the run is over.
bool Simulation::Impl::advance(double limit) {
  for (;;) {
    switch (advance_once(limit)) {
      case Progress::Limit: return true;
      case Progress::Over: return false;
      case Progress::Sample:
      case Progress::Event: break;
    }
  }
}

Sample Simulation::Impl::compute_sample(double t) {
  Sample r;
  r.time = t;
  std::vector<const Peer*> set;
  // A joiner still fetching the swarm's model holds only its own initialisation, which it
  // never trains on or reports (rumor-peer writes no eval before the state arrives): leave it
  // out, or every join would show as a dip in the average model.
  for (const Peer& p : peers)
    if (p.running() && p.model && (!p.loop || p.gossip()->state_ready())) set.push_back(&p);
  r.peers = static_cast<std::uint32_t>(set.size());
  if (set.empty())
    for (const Peer& p : peers)
      if (p.state == PeerState::Done && p.model) set.push_back(&p);
  r.bytes = totals.bytes;
  r.exchanges = totals.exchanges;
  r.failed = totals.failed;
  r.dropped = totals.dropped;
  if (set.empty()) {
    r.mean_step = r.loss = r.test_acc = r.peer_loss = r.peer_acc = r.peer_acc_min = kNaN;
    r.consensus_distance = r.spread = kNaN;
    return r;
  }
  const std::size_t P = xbar.size();
  std::fill(xbar.begin(), xbar.end(), 0.0);
  double steps = 0;
  for (const Peer* p : set) {
    const float* x = p->model->params().data();
    for (std::size_t j = 0; j < P; ++j) xbar[j] += x[j];
    steps += static_cast<double>(peer_steps(*p));
  }
  const double n = static_cast<double>(set.size());
  for (auto& v : xbar) v /= n;
  double dev = 0, norm = 0;
  for (const Peer* p : set) {
    const float* x = p->model->params().data();
    for (std::size_t j = 0; j < P; ++j) {
      const double d = x[j] - xbar[j];
      dev += d * d;
    }
  }
  for (double v : xbar) norm += v * v;
  r.mean_step = steps / n;
  r.spread = std::sqrt(dev / n);
  r.consensus_distance = norm > 0 ? r.spread / std::sqrt(norm) : (dev > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (s.workload == WorkloadKind::Quadratic) {
    r.loss = work->quadratic_loss(xbar);
    r.test_acc = 0;
  } else {
    xbar_f.assign(xbar.begin(), xbar.end());
    const EvalResult e = work->evaluate(xbar_f);
    r.loss = e.loss;
    r.test_acc = e.accuracy;
  }
  sample_peer_models(r, s.eval_peers, set.size(), [&](std::size_t i) { return work->evaluate(set[i]->model->params()); });
  return r;
}

void Simulation::Impl::record_sample(double t) {
  const double keep = now;
  now = t;
  samples.push_back(compute_sample(t));
  now = keep;
}

// ---------------------------------------------------------------- public face

Simulation::Simulation(const Scenario& s) : impl_(std::make_unique<Impl>(s)) { impl_->owner = this; }

bool Simulation::step() {
  for (;;) {
    switch (impl_->advance_once(std::numeric_limits<double>::infinity())) {
      case Impl::Progress::Event: return true;
      case Impl::Progress::Over: return false;
      case Impl::Progress::Sample:
      case Impl::Progress::Limit: break;
    }
  }
}

void Simulation::for_each_message_in_flight(
    const std::function<void(const PeerId& from, const PeerId& to, const Message&)>& f) const {
  std::vector<bool> free(impl_->slots.size(), false);
  for (auto i : impl_->free_slots) free[i] = true;
  for (std::size_t i = 0; i < impl_->slots.size(); ++i)
    if (!free[i]) f(impl_->peers[impl_->slots[i].from].id, impl_->peers[impl_->slots[i].to].id, impl_->slots[i].msg);
}

std::size_t Simulation::events_size() const { return impl_->events.size(); }
std::string Simulation::events_since(std::size_t offset) const { return impl_->events.substr(std::min(offset, impl_->events.size())); }

void Simulation::set_after_event(std::function<void(const Simulation&)> hook) { impl_->after_event = std::move(hook); }
Simulation::~Simulation() = default;

void Simulation::run() {
  while (impl_->advance(std::numeric_limits<double>::infinity())) {
  }
}
bool Simulation::run_until(double t) { return impl_->advance(t); }
double Simulation::now() const { return impl_->now; }
bool Simulation::finished() const { return impl_->ended; }
const Scenario& Simulation::scenario() const { return impl_->s; }
std::uint32_t Simulation::ids() const { return static_cast<std::uint32_t>(impl_->peers.size()); }
PeerState Simulation::state(std::uint32_t peer) const { return impl_->peers.at(peer).state; }
std::span<const float> Simulation::params(std::uint32_t peer) const {
  const Peer& p = impl_->peers.at(peer);
  return p.model ? std::span<const float>(p.model->params()) : std::span<const float>();
}
const Gossip* Simulation::gossip(std::uint32_t peer) const { return impl_->peers.at(peer).gossip(); }
const PeerLoop* Simulation::loop(std::uint32_t peer) const { return impl_->peers.at(peer).loop.get(); }
std::uint64_t Simulation::steps(std::uint32_t peer) const { return impl_->peer_steps(impl_->peers.at(peer)); }
const std::vector<Sample>& Simulation::samples() const { return impl_->samples; }
const Totals& Simulation::totals() const { return impl_->totals; }
Sample Simulation::sample_now() { return impl_->compute_sample(impl_->now); }
double Simulation::quadratic_stationary_loss(std::uint32_t n) const {
  return impl_->s.workload == WorkloadKind::Quadratic ? impl_->work->quadratic_stationary_loss(n) : 0.0;
}

std::vector<double> Simulation::mean_params(std::size_t* count) const {
  std::vector<double> m(impl_->work->param_count(), 0.0);
  std::size_t n = 0;
  for (const Peer& p : impl_->peers)
    if (p.running() && p.model) {
      const auto x = p.model->params();
      for (std::size_t j = 0; j < m.size(); ++j) m[j] += x[j];
      ++n;
    }
  if (n)
    for (auto& v : m) v /= static_cast<double>(n);
  if (count) *count = n;
  return m;
}

std::string Simulation::timeseries_csv() const { return timeseries_csv_of(impl_->samples); }

std::string timeseries_csv_of(const std::vector<Sample>& samples) {
  std::string out =
      "time,peers,mean_step,loss,test_acc,peer_loss,peer_acc,peer_acc_min,consensus_distance,spread,bytes,exchanges,"
      "exchanges_failed,dropped\n";
  for (const Sample& r : samples)
    out += format("%.6f,%u,%.3f,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%llu,%llu,%llu,%llu\n", r.time, r.peers, r.mean_step,
                  r.loss, r.test_acc, r.peer_loss, r.peer_acc, r.peer_acc_min, r.consensus_distance, r.spread,
                  static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.exchanges),
                  static_cast<unsigned long long>(r.failed), static_cast<unsigned long long>(r.dropped));
  return out;
}

std::string Simulation::events_csv() const { return kEventsCsvHeader + impl_->events; }

std::string format(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  const int n = std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  va_start(ap, f);
  std::vsnprintf(big.data(), big.size(), f, ap);
  va_end(ap);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

std::string json_number(double x) { return std::isfinite(x) ? format("%.9g", x) : "null"; }
std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += format("\\u%04x", c);
      continue;
    }
    o += c;
  }
  return o + "\"";
}

void sample_peer_models(Sample& r, std::size_t eval_peers, std::size_t n,
                        const std::function<EvalResult(std::size_t)>& eval) {
  const std::size_t k = std::min(eval_peers, n);
  r.peer_loss = r.peer_acc = r.peer_acc_min = kNaN;
  if (k == 0) return;
  double l = 0, a = 0, amin = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < k; ++j) {
    const EvalResult e = eval(j * n / k);
    l += e.loss;
    a += e.accuracy;
    amin = std::min(amin, e.accuracy);
  }
  r.peer_loss = l / static_cast<double>(k);
  r.peer_acc = a / static_cast<double>(k);
  r.peer_acc_min = amin;
}

std::string final_sample_json(const Sample& last) {
  return "\"final\": {\"time\": " + json_number(last.time) + ", \"test_acc\": " + json_number(last.test_acc) +
         ", \"loss\": " + json_number(last.loss) + ", \"peer_acc\": " + json_number(last.peer_acc) +
         ", \"consensus_distance\": " + json_number(last.consensus_distance) +
         ", \"mean_step\": " + json_number(last.mean_step) + "}";
}

void write_run_outputs(const std::string& dir, const std::string& timeseries, const std::string& events,
                       const std::string& summary) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create output directory '" + dir + "': " + ec.message());
  const auto put = [&](const char* name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
  };
  put("timeseries.csv", timeseries);
  put("events.csv", events);
  put("summary.json", summary);
}


std::string Simulation::summary_json() const {
  const Impl& w = *impl_;
  const Totals& t = w.totals;
  std::uint32_t done = 0, crashed = 0, left = 0, live = 0;
  double acc_sum = 0, acc_n = 0;
  for (const Peer& p : w.peers) {
    done += p.state == PeerState::Done;
    crashed += p.state == PeerState::Crashed;
    left += p.state == PeerState::Left;
    live += p.running();
    if (p.state == PeerState::Done && std::isfinite(p.final_acc)) {
      acc_sum += p.final_acc;
      acc_n += 1;
    }
  }
  const Sample last = w.samples.empty() ? Sample{} : w.samples.back();
  const auto u = [](std::uint64_t x) { return std::to_string(x); };
  std::string o = "{\n";
  o += "  \"scenario\": " + json_string(w.s.source) + ",\n";
  o += "  \"seed\": " + u(w.s.seed) + ",\n";
  o += "  \"workload\": " + json_string(w.s.workload == WorkloadKind::Model ? w.s.model : "quadratic") + ",\n";
  o += std::string("  \"training\": ") + (w.s.training ? "true" : "false") + ",\n";
  o += "  \"topology\": " + json_string(topology_name(w.s.topology)) + ",\n";
  o += "  \"founders\": " + u(w.s.founders) + ",\n";
  o += "  \"peer_ids\": " + u(w.peers.size()) + ",\n";
  o += "  \"virtual_time\": " + json_number(w.now) + ",\n";
  o += "  \"events\": " + u(t.events) + ",\n";
  o += "  \"steps\": " + u(t.steps) + ",\n";
  o += "  \"messages\": " + u(t.messages) + ",\n";
  o += "  \"bytes\": " + u(t.bytes) + ",\n";
  o += "  \"dropped\": " + u(t.dropped) + ",\n";
  o += "  \"refused\": " + u(t.refused) + ",\n";
  o += "  \"exchanges\": " + u(t.exchanges) + ",\n";
  o += "  \"answered\": " + u(t.answered) + ",\n";
  o += "  \"exchanges_failed\": " + u(t.failed) + ",\n";
  o += "  \"exchanges_declined\": " + u(t.declined) + ",\n";
  o += "  \"rejected\": " + u(t.rejected) + ",\n";
  o += "  \"crashes\": " + u(t.crashes) + ",\n";
  o += "  \"leaves\": " + u(t.leaves) + ",\n";
  o += "  \"joins\": " + u(t.joins) + ",\n";
  o += "  \"peers_done\": " + u(done) + ",\n";
  o += "  \"peers_crashed\": " + u(crashed) + ",\n";
  o += "  \"peers_left\": " + u(left) + ",\n";
  o += "  \"peers_running\": " + u(live) + ",\n";
  o += "  " + final_sample_json(last) + ",\n";
  o += "  \"peer_final_test_acc\": " + json_number(acc_n > 0 ? acc_sum / acc_n : kNaN) + "\n";
  o += "}\n";
  return o;
}

void Simulation::write_outputs(const std::string& dir) const {
  write_run_outputs(dir, timeseries_csv(), events_csv(), summary_json());
}

}  // namespace rumor::sim
