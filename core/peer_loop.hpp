// The loop around the gossip protocol, once, for every driver: when to step, when the
// staleness bound holds a peer back, when to evaluate, when training stops, how a peer settles
// afterwards, how long a joiner waits for the swarm's model and a leaver for its hand-over.
// It is sans-I/O like Gossip (which it owns): it never waits, it says what to do next.
//
// Three drivers carry its actions out:
//  - rumor-peer (peer/daemon.cpp): real time; a Wait blocks on the inbox until `until` or an
//    input arrives;
//  - rumor-sim (sim/): virtual time; a Wait schedules an event at `until` (an input delivered
//    meanwhile calls next() at once);
//  - the Python module (python/): the user's torch loop; a Step returns control to the user,
//    whose optimizer step ends with step_done().
//
// The driver's own part of the contract (one thread, the one that calls everything here):
//  1. hand every input (messages, timers, send failures) to gossip() *before* calling next(),
//     and once more between a step's forward/backward and its optimizer update ("mid-step
//     drain": the parameters are not in use then);
//  2. carry out the action next() returned, then call next() again (after a Step: step_done()
//     first; after Evaluate: nothing to report);
//  3. call request_stop() for a graceful leave (SIGTERM, a churn event, close()).
//
// Phases, in order (each can be skipped): Joining (only with a finite join_timeout_s: until a
// member of the join list answers; none by the deadline: exit 1, unless we are in our own join
// list, then we start the swarm) -> MinPeers (wait until `min_peers` are in view) ->
// State (a joiner waits for the swarm's model: at most `state_wait_s`) -> Training (first
// evaluation; then {staleness wait; step} until a stop rule) -> Settling (no training; keep
// exchanging until the models agree, only with members it can change a model with, no faster
// than training's pace and backing off while members still train or the models agree: at most
// `settle_s`, or `settle_max_s` while a member is still training) -> Leaving
// (SIGTERM: announce, hand the model over, at most `leave_wait_s`) -> Final (wait for the
// exchanges we started, at most their deadline: their responders may have mixed) -> final
// evaluation -> Exit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "core/gossip.hpp"
#include "core/loop_model.hpp"

namespace rumor {

// The protocol's knobs as a peer's loop starts them: GossipConfig's own defaults, except that
// a join is retried for 120 s rather than for ever, and the probe timeout is derived from the
// probe interval (resolved()).
inline GossipConfig loop_gossip_defaults() {
  GossipConfig g;
  g.join_timeout_s = 120;
  g.probe_timeout_s = NAN;
  return g;
}

// Every knob of a peer's loop, with its default: the daemon's flags, the simulator's scenario
// keys and the Python module's keyword arguments are all read through the table of
// core/knobs.hpp, which points at these fields. Documented constants are below.
struct LoopSettings {
  GossipConfig gossip = loop_gossip_defaults();  // the protocol's own knobs (probe_timeout_s: see resolved())
  // Stop rules: training ends at the first that holds (0: not used; none set: only a stop
  // request ends it, as in the Python module where the user's loop decides). An explicit
  // steps, duration or swarm budget replaces the epoch budget (apply_stop_precedence,
  // core/knobs.hpp).
  std::uint64_t steps = 0;
  double epochs = 5;
  double duration_s = 0;         // seconds since training began
  // The swarm-wide budget: stop when the swarm as a whole has processed this many samples, as
  // this peer knows it (Gossip::swarm_samples: the counts members' digests carry, leavers and
  // dead members included), or swarm_epochs x the whole training set (all shards:
  // train_set_rows, which the driver fills in). Fast peers then do more steps than slow ones
  // and all stop together, within the time news of the last samples takes to spread.
  std::uint64_t swarm_samples = 0;
  double swarm_epochs = 0;
  std::uint64_t train_set_rows = 0;  // not a knob: the rows of the whole training set
  // The learning rate follows the number of peers whose gradients reach this model through
  // averaging (ourselves and the live members still training): scaled by that number over the
  // most this peer has seen while training, as the linear scaling rule scales it with the batch.
  // A peer left alone by its neighbours otherwise trains on with a step size tuned for n peers'
  // averaged gradient noise and loses points within tens of steps (docs/ARCHITECTURE.md,
  // "A peer left alone"). PeerLoop::lr_scale; the driver multiplies its schedule's rate by it.
  bool lr_follows_peers = true;
  // Evaluations (off in the Python module and in simulations without peer_evals): when
  // training begins (after any state transfer), every `eval_every` steps (0: at each whole
  // epoch), and once at the end.
  bool evaluate = true;
  // false: only the evaluation at the end (a Python peer other than the one that reports
  // progress, examples/torch_quickstart.py --eval-peers; rumor-sim's output.train_evals).
  bool evaluate_in_training = true;
  std::uint64_t eval_every = 0;
  std::size_t min_peers = 1;     // wait for this many peers (ourselves included) before training
  double min_peers_timeout_s = 120;  // ... then train anyway
  double state_wait_s = 60;      // a joiner without the swarm's model by then trains from its own
  double leave_wait_s = 4;       // a leaving peer exits by then even without a LeaveAck
  // After training, keep averaging (no training) up to settle_s; but while a live member is
  // still behind our clock (still training: a slower machine, or one that shares its cores)
  // keep going up to settle_max_s, so that the last peer to finish still has someone to average
  // with instead of ending with the model it trained alone at the end.
  double settle_s = 3;
  double settle_max_s = 60;
  // While members are still training, or once the models agree, a settling peer starts
  // exchanges ever more rarely: the interval grows kSettleBackoff-fold after each, up to this.
  double settle_interval_max_s = 4;
  // Fills what is derived: probe_timeout_s NaN -> min(0.25, probe_interval_s / 2); the
  // swarm budget in samples from swarm_epochs (when swarm_samples is not given; needs
  // train_set_rows).
  LoopSettings resolved() const;

  // Documented constants (docs/ARCHITECTURE.md "One loop").
  // While the staleness bound holds a peer back: probe the slowest members at most this often,
  // and start exchanges at the pace training had (training_pace), not faster: the models of
  // peers that wait together stop changing, and exchanging them again only burns the CPU the
  // slow peer needs.
  static constexpr double kIdleInterval = 0.005;
  static constexpr double kSettleMinTick = 0.002;  // settling exchanges at most every 2 ms
  // ... at most this long apart while the models differ (or before any step was timed)
  static constexpr double kSettleTickUntrained = 0.01;
  static constexpr double kSettledDistance = Gossip::kAgreeDistance; // an exchange with a model this close: "close"
  static constexpr int kSettledClose = 4;          // settled after 4 close exchanges in a row
  static constexpr std::uint64_t kSettledInitiated = 6;  // ... or 6 initiated since settling began (partners in turn: Gossip::start_exchange)
  static constexpr double kSettleBackoff = 4;  // settling's back-off factor (settle_interval_max_s)
};

// When settling ends (after training, or a pause): up to
// max(settle, settle_max) from its start while a live member is behind our clock (still
// training), and `settle` from its start or, once the last member behind has caught up, from
// that moment: its last steps are not in our model yet.
class SettleDeadline {
 public:
  void begin(double now) {
    start_ = from_ = now;
    waited_ = false;
  }
  // One pass: true if the last member behind caught up since the previous one.
  bool update(double now, bool behind) {
    const bool caught_up = waited_ && !behind;
    if (caught_up) from_ = now;
    waited_ = behind;
    return caught_up;
  }
  double end(double settle, double settle_max) const {
    return waited_ ? start_ + std::max(settle, settle_max) : from_ + settle;
  }
  // Of the time since begin(), that spent with a live member behind our clock: until the last
  // one caught up, or until now while one still is.
  double behind(double now) const { return waited_ ? now - start_ : from_ - start_; }

 private:
  double start_ = 0, from_ = 0;
  bool waited_ = false;  // at the last pass a live member was behind our clock
};

// What the driver does next.
struct LoopAction {
  enum class Kind {
    Step,      // one training step, then step_done()
    Wait,      // handle inputs as they come; call next() after each, and at `until` at the latest
    Evaluate,  // evaluate the live parameters and report it (`final`: the last one)
    Exit,      // done: `exit_code` 0 (finished or left), 1 (diverged)
  } kind = Kind::Wait;
  double until = 0;
  bool final = false;
  int exit_code = 0;
};

enum class LoopPhase { Idle, Joining, MinPeers, State, Training, Settling, Leaving, Final, Exited };
const char* loop_phase_name(LoopPhase p);

// What the loop measured, for progress lines and metrics.
struct LoopStats {
  std::uint64_t waits = 0;       // times the staleness bound held us back
  double wait_seconds = 0;
  std::int64_t max_gap = 0;      // largest clock - slowest at a step start since the last evaluation
  double train_seconds = 0;      // time in steps (the driver's measure), for samples/s
  double interval_seconds = 0;   // ... since the last evaluation
  std::uint64_t interval_samples = 0;
  double training_started = -1;  // env time training began (after the state wait); -1 before
  double training_ended = -1;    // env time the training loop ended
  // Settling after training (or a pause, PeerLoop::pause): the seconds of it spent waiting for
  // members still behind our clock (peers that had not finished their own budget), set when it
  // ends. A large figure against the training time says the swarm's budget is per peer on
  // machines of different speeds: a swarm-wide one (LoopSettings::swarm_samples) would share
  // the work.
  double settle_behind_seconds = 0;
  bool diverged = false;
};

class PeerLoop {
 public:
  PeerLoop(Env& env, const LoopSettings& settings, MemberDigest self, std::string fingerprint, LoopModel& model);

  // Joins through `seeds` (none: a new swarm of one) and enters the first phase.
  void start(const std::vector<PeerId>& seeds);
  // What to do now (see the contract at the top). Idempotent between inputs: calling it again
  // without anything having happened returns the same Wait.
  LoopAction next();
  // The Step just carried out: its loss (non-finite: training diverged, exit 1), its compute
  // seconds and the samples it used.
  void step_done(double loss, double seconds, std::uint64_t batch_samples);
  // Graceful leave at the next boundary (announce, hand the model over), then exit 0.
  void request_stop();
  bool stop_requested() const { return stop_requested_; }
  // A pause in training that the driver asks for (the Python module's serve(): the user's loop
  // stops stepping for a while): at the next boundary of the Training phase the loop settles
  // as it does after training (same pace, same deadline rule: `seconds`, up to `max_seconds`
  // while a member is behind our clock), except that being settled only stops it starting
  // exchanges (it keeps answering until the deadline) and that it then returns to Training
  // (next() says Step again). Outside Training it changes nothing: the phase goes on. The
  // driver calls end_pause() when it stops waiting for that Step (its own deadline).
  void pause(double seconds, double max_seconds);
  void end_pause();

  Gossip& gossip() { return gossip_; }
  const Gossip& gossip() const { return gossip_; }
  LoopPhase phase() const { return phase_; }
  const LoopStats& stats() const { return stats_; }
  const LoopModel& model() const { return model_; }
  const LoopSettings& settings() const { return s_; }
  // A live member is behind our clock (still training): settling may go on up to settle_max_s.
  bool others_behind() const;
  // Evaluations report samples/s over the interval since the previous one: the driver calls
  // this after reporting one.
  void reset_interval();
  // With a swarm-wide budget: the swarm's progress towards it in [0, 1] (what a schedule that
  // follows the swarm anneals by: Trainer::follow_progress); NaN without one.
  double swarm_progress() const {
    return s_.swarm_samples ? std::min(1.0, static_cast<double>(gossip_.swarm_samples()) / static_cast<double>(s_.swarm_samples))
                            : NAN;
  }
  // The factor the learning rate is multiplied by at this step (LoopSettings::lr_follows_peers):
  // the peers training now, ourselves included, over the most seen while we trained; 1 when
  // the setting is off. Call once per step, before it (it records the peak).
  double lr_scale();
  // Exchanges completed, as initiator and as responder.
  std::uint64_t exchanges() const { return gossip_.stats().exchanges + gossip_.stats().answered; }
  // The time training took per exchange (H steps' worth of step time), at least `floor`;
  // `untrained` before any step was timed. Settling and the staleness wait start exchanges no
  // faster than this once the models agree.
  double training_pace(double floor, double untrained) const;
  // A stop rule (epochs, steps, duration, the swarm's budget) says training is over.
  bool stop_rule() const;

 private:
  bool eval_due() const;
  void enter(LoopPhase p);
  LoopAction wait_until(double t) { return {LoopAction::Kind::Wait, t}; }
  void begin_training();
  LoopAction training_top();
  LoopAction after_training();
  LoopAction begin_leave();
  void begin_settling(double settle_s, double settle_max_s);
  // A pause is over: say so (a Settled event, "pause") and go back to Training.
  void resume_training();
  LoopAction settle_next();
  // The fastest pace of settling exchanges: one per H steps of our own training or of the
  // slowest member still training, whichever is slower; in a pause, every
  // kSettleTickUntrained (or faster, at that pace) while the last exchange found the models
  // apart.
  double settle_tick() const;
  // Gossip::on_idle at most once per `interval`, letting it start an exchange (with `partners`)
  // at most once per `exchange_every` (a multiple of interval, or equal to it). True if it
  // started one.
  bool idle_if_due(double interval, double exchange_every, Gossip::Partners partners = Gossip::Partners::Any);
  void emit(ProtocolEvent::Kind k, std::uint64_t clock, std::uint64_t other, double seconds, double distance,
            std::string reason);

  Env& env_;
  LoopSettings s_;
  LoopModel& model_;
  Gossip gossip_;
  LoopPhase phase_ = LoopPhase::Idle;
  LoopStats stats_;
  bool stop_requested_ = false;
  double phase_start_ = 0;
  double last_idle_ = -1;        // env time of the last Gossip::on_idle
  double last_idle_exchange_ = -1;  // ... of the last one allowed to start an exchange
  bool first_eval_pending_ = false, eval_pending_ = false;
  bool state_pending_ = false;  // the State phase began without the swarm's model
  std::uint64_t next_epoch_eval_ = 1;
  // The staleness wait in progress.
  bool waiting_stale_ = false;
  double stale_since_ = 0;
  std::uint64_t wait_slowest_ = 0;
  // Settling (after training, or a pause).
  double settle_s_ = 0, settle_max_s_ = 0;  // this settling's deadline rule
  bool pause_pending_ = false, pausing_ = false;
  double pause_s_ = 0, pause_max_s_ = 0;
  std::uint64_t settle_seen_ = 0, settle_initiated_ = 0, settle_before_ = 0;
  int settle_close_ = 0;
  double settle_interval_ = 0;  // the backed-off interval between settling exchanges (0: the tick)
  SettleDeadline settle_deadline_;
  bool final_eval_done_ = false;
  std::size_t peak_trainers_ = 1;  // lr_scale
  int exit_code_ = 0;
};

}  // namespace rumor
