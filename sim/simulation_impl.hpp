// The simulator's insides, shared by the files that implement Simulation (private to sim/):
// SimEnv (the seam: core/env.hpp with virtual time), the per-peer state, and Simulation::Impl.
//   simulator.cpp   the engine: construction, events in (time, sequence) order, churn, stepping
//   peer_life.cpp   the driver of each peer's core::PeerLoop, and the compute model
//   delivery.cpp    inputs: the network hand-over, inboxes, protocol events
//   sampling.cpp    timeseries samples (average model, consensus, peers' own models)
//   output.cpp      the CSV and JSON outputs
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "core/peer_loop.hpp"
#include "sim/event_queue.hpp"
#include "sim/faults.hpp"
#include "sim/invariants.hpp"
#include "sim/network.hpp"
#include "sim/simulator.hpp"
#include "sim/streams.hpp"
#include "sim/topology.hpp"
#include "sim/workload.hpp"

namespace rumor::sim {

bool aligned_heap();  // sim/aligned_new.cpp: makes runs independent of allocation history


// A peer's loop settings from the scenario: its knobs (core/knobs.hpp), with what the
// simulator decides itself (evaluations only with output.peer_evals; no epochs without training).
inline LoopSettings loop_settings(const Scenario& s) {
  LoopSettings ls = s.loop;
  if (!s.training) ls.epochs = 0;
  ls.evaluate = s.peer_evals;
  return ls;
}

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();


inline std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

// "p17" -> 17; anything else -> -1.
inline std::int64_t peer_index(const PeerId& id) {
  if (id.size() < 2 || id[0] != 'p') return -1;
  std::int64_t x = 0;
  for (std::size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9' || x > (1ll << 40)) return -1;
    x = x * 10 + (id[i] - '0');
  }
  return x;
}

inline PeerId peer_id(std::uint32_t i) { return "p" + std::to_string(i); }

struct Input {
  enum class Kind : std::uint8_t { Message, Timer, SendFailed } kind;
  std::uint32_t other;  // SendFailed: the target
  std::uint64_t arg;    // Message: slab index; Timer: id
  double t = 0;         // when it came (Impl::offer): an inbox is in this order
};

struct Slot {
  Message msg;
  std::uint32_t from = 0, to = 0, from_life = 0, to_life = 0;
  std::uint64_t bytes = 0;
};


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
    else ticks = step;  // the clock the protocol adopted (the checker found it going back)
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
  bool served = false;          // compute.driver = python: the script's serve() after its last step began
  bool draining = false;        // handling the inputs its inbox held (Impl::drain)
  std::size_t drain_next = 0;   // while draining: the inbox entry handled next
  double wait_until = -1;       // the WaitTick event set for the current wait
  std::uint64_t wait_iter = 0, step_iter = 0;  // void earlier WaitTick / Tick events
  std::uint32_t cpu = 0;  // its scheduler weight in Impl::cpu_weight (compute.shared_cores)
  double slice_phase = 0; // compute.time_slice: where in the period its slices fall, in [0, 1)
  // compute.turns = random: its turns on the cores from the current one on ([from, to) each,
  // in order, from turn_head), and the stream they are drawn from.
  std::vector<std::pair<double, double>> turns;
  std::size_t turn_head = 0;
  Rng turn_rng;
  bool active = false;    // counted in Impl::active: loading or running
  std::vector<Input> inbox;
  std::unique_ptr<SimEnv> env;
  std::unique_ptr<PeerModel> model;
  std::unique_ptr<SimLoopModel> side;
  std::unique_ptr<PeerLoop> loop;
  Rng compute_rng;
  std::vector<std::uint32_t> stragglers;  // indices of the straggler lines that name it
  double started_at = 0, step_end_at = 0, step_seconds = 0, pending_cpu = 0, last_loss = 0;
  // Env::cpu() for --local-steps auto: the compute charged to its steps (each step's work,
  // exchange CPU included) and the exchange CPU charged (compute.exchange_cpu per payload
  // message sent or received), both in seconds of its own (capped) pace.
  double cpu_total = 0, cpu_protocol = 0;
  // A payload's exchange CPU: on its next step, and on its protocol clock.
  void charge_exchange_cpu(double cpu) {
    pending_cpu += cpu;
    cpu_protocol += cpu;
  }
  std::uint64_t bytes_sent = 0, bytes_recv = 0;
  double final_acc = kNaN, final_loss = kNaN;
  // An evaluation in progress: its "eval" line waits for the pause's end (Resume), as the
  // daemon and the Python peers write theirs once the test set is done.
  bool eval_pending = false;
  std::uint64_t eval_steps = 0;
  std::string eval_detail;
  // Faults (sim/faults.hpp): this life's step-time factor (slow) and clock rate (clock_skew);
  // a stall in progress; the model a fault crash left behind, for a restart (a checkpoint).
  double slow = 1, rate = 1;
  bool stalled = false;
  bool has_checkpoint = false;
  bool resumed = false;  // this life came from the checkpoint
  std::vector<float> checkpoint;
  std::uint64_t checkpoint_step = 0;

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
  // The finished models the last sample was taken over, when it had only those (compute_sample).
  struct DoneModel {
    std::uint32_t index, life;
    const PeerModel* model;
    bool operator==(const DoneModel&) const = default;
  };
  std::vector<DoneModel> done_sampled;
  // Faults (sim/faults.hpp): their stream, how often each fired, restarts still to come (they
  // keep the run going), and the partition in force: each live peer's side (0: none).
  Rng fault_rng;
  FaultCounts fault_counts{};
  std::uint32_t restarts_left = 0;
  std::vector<std::uint8_t> fault_side;
  double partition_until = -1;   // the partition in force heals then (-1: none)
  double last_heal = -1;         // when the last one healed (the no-split-brain invariant)
  std::uint64_t partitions_healed = 0;
  enum FaultAction : std::uint64_t { kFaultCrash = 1, kFaultRestart = 2, kStallEnd = 3, kPartitionStart = 4, kPartitionHeal = 5 };
  // One draw of point `f` (nothing drawn when it is off); counts it if it fires.
  bool fire(FaultPoint f) {
    const double pr = s.faults[f];
    if (!(pr > 0)) return false;
    if (fault_rng.uniform() >= pr) return false;
    ++fault_counts[static_cast<std::size_t>(f)];
    return true;
  }
  bool fault_partitioned(std::uint32_t a, std::uint32_t b) const {
    return partition_until > now && fault_side[a] && fault_side[b] && fault_side[a] != fault_side[b];
  }
  std::unique_ptr<InvariantChecker> checker;
  std::int64_t last_peer = -1;  // the peer of the event just processed (-1: a churn or swarm event)
  void fault_event(const Event& e);
  void fault_crash(Peer& p, FaultPoint why);
  void schedule_partition();
  // The message faults of one send (delivery.cpp): false if the message goes no further.
  bool message_faults(std::uint32_t from, std::uint32_t to, Message& msg, double& at, bool& duplicate);

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
    events += fmt::format("{:.6f},{},{},{},{},{:.9g},", now, p.id, event, other, clock, value);
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
  void log_eval(Peer& p);  // the pending evaluation's "eval" line, at the pause's end
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
  // When `work` seconds of one core's compute, begun at `start`, end for peer p: start + work x
  // cpu_factor(), or with compute.time_slice, at the end of the work's last slice.
  double cpu_end(Peer& p, double start, double work);
  // compute.turns = random: the end of `work` begun at `start` in p's turns on the cores,
  // drawn from its stream as far ahead as needed (kept in Peer::turns).
  double end_in_turns(Peer& p, double start, double work, double f);
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
  // Its clock runs at `rate` of virtual time (faults.clock_skew; 1 without it).
  double now() const override { return w_.now * rate_; }
  void send(const PeerId& to, Message msg) override { w_.send(peer_, to, std::move(msg)); }
  void set_timer(double delay_s, std::uint64_t id) override {
    // A timer already due (delay_s < 0 says how long ago), set while the peer works through
    // the inputs it held during a step: it joins them where it would have come, after the
    // inputs that arrived before its time. (An exchange deadline that passed while the peer
    // was busy, re-armed late by Gossip::on_deadline, is seen where a timer of its own was.)
    if (delay_s < 0 && w_.peers[peer_].draining) {
      Peer& p = w_.peers[peer_];
      const double at = w_.now + delay_s / rate_;
      auto pos = p.inbox.begin() + static_cast<std::ptrdiff_t>(p.drain_next);
      while (pos != p.inbox.end() && pos->t < at) ++pos;
      p.inbox.insert(pos, Input{Input::Kind::Timer, 0, id, at});
      return;
    }
    w_.schedule(w_.now + std::max(delay_s, 0.0) / rate_, EventKind::Timer, peer_, life_, id);
  }
  void set_rate(double r) { rate_ = r; }
  double rate() const { return rate_; }
  void disconnect(const PeerId&) override {}  // connections are not modelled
  Rng& rng() override { return rng_; }
  void event(const ProtocolEvent& e) override { w_.protocol_event(peer_, e); }
  CpuClocks cpu() const override {
    if (!w_.s.training) return {};
    const Peer& p = w_.peers[peer_];
    return {p.cpu_total, p.cpu_protocol};
  }

 private:
  Simulation::Impl& w_;
  std::uint32_t peer_, life_;
  Rng rng_;
  double rate_ = 1;
};


}  // namespace rumor::sim
