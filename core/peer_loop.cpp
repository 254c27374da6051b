// PeerLoop: the phases of a peer's life around Gossip (core/peer_loop.hpp has the contract).
#include "core/peer_loop.hpp"

#include <algorithm>
#include <utility>

#include "core/check.hpp"

namespace rumor {

const char* loop_phase_name(LoopPhase p) {
  switch (p) {
    case LoopPhase::Idle: return "idle";
    case LoopPhase::Joining: return "joining";
    case LoopPhase::MinPeers: return "min_peers";
    case LoopPhase::State: return "state";
    case LoopPhase::Training: return "training";
    case LoopPhase::Settling: return "settling";
    case LoopPhase::Leaving: return "leaving";
    case LoopPhase::Final: return "final";
    case LoopPhase::Exited: return "exited";
  }
  return "?";
}

LoopSettings LoopSettings::resolved() const {
  LoopSettings r = *this;
  if (std::isnan(r.gossip.probe_timeout_s)) r.gossip.probe_timeout_s = std::min(0.25, r.gossip.probe_interval_s / 2);
  if (r.swarm_epochs > 0 && !r.swarm_samples) {
    RUMOR_CHECK(r.train_set_rows > 0, "swarm_epochs needs the training set's size (LoopSettings::train_set_rows)");
    r.swarm_samples = static_cast<std::uint64_t>(std::ceil(r.swarm_epochs * static_cast<double>(r.train_set_rows)));
  }
  return r;
}

PeerLoop::PeerLoop(Env& env, const LoopSettings& settings, MemberDigest self, std::string fingerprint, LoopModel& model)
    : env_(env),
      s_(settings.resolved()),
      model_(model),
      gossip_(env, s_.gossip, std::move(self), std::move(fingerprint), model.params()) {
  RUMOR_CHECK(s_.min_peers >= 1);
  RUMOR_CHECK(s_.state_wait_s >= 0 && s_.leave_wait_s >= 0 && s_.settle_s >= 0);
}

void PeerLoop::emit(ProtocolEvent::Kind k, std::uint64_t clock, std::uint64_t other, double seconds, double distance,
                    std::string reason) {
  ProtocolEvent e{k, {}, std::move(reason)};
  e.clock = clock;
  e.other = other;
  e.seconds = seconds;
  e.distance = distance;
  env_.event(e);
}

void PeerLoop::enter(LoopPhase p) {
  phase_ = p;
  phase_start_ = env_.now();
  last_idle_ = last_idle_exchange_ = -1;
  if (p == LoopPhase::State) state_pending_ = !gossip_.state_ready();  // a joiner that must fetch the model
}

void PeerLoop::start(const std::vector<PeerId>& seeds) {
  RUMOR_CHECK(phase_ == LoopPhase::Idle, "start() once");
  // A model resumed from a checkpoint: its clock, not 0 (a restart told 0 and held the
  // swarm's staleness bound back; the simulator's faults.restart found it).
  if (model_.steps()) gossip_.resume_clock(model_.steps(), model_.samples());
  gossip_.start(seeds);
  const bool deadline = std::isfinite(s_.gossip.join_timeout_s);
  enter(deadline && gossip_.joining() ? LoopPhase::Joining : s_.min_peers > 1 ? LoopPhase::MinPeers : LoopPhase::State);
}

void PeerLoop::request_stop() { stop_requested_ = true; }

void PeerLoop::pause(double seconds, double max_seconds) {
  RUMOR_CHECK(seconds >= 0 && max_seconds >= 0);
  pause_pending_ = true;
  pause_s_ = seconds;
  pause_max_s_ = max_seconds;
}

void PeerLoop::end_pause() {
  pause_pending_ = false;
  if (pausing_) resume_training();  // the driver stopped waiting first
}

void PeerLoop::resume_training() {
  pausing_ = false;
  gossip_.pause_outer(false);
  stats_.settle_behind_seconds = settle_deadline_.behind(env_.now());
  emit(ProtocolEvent::Kind::Settled, model_.steps(), exchanges() - settle_before_, env_.now() - phase_start_,
       gossip_.stats().last_distance, "pause");
  enter(LoopPhase::Training);
}

void PeerLoop::reset_interval() {
  stats_.interval_seconds = 0;
  stats_.interval_samples = 0;
  stats_.max_gap = 0;
}

bool PeerLoop::stop_rule() const {
  if (s_.steps && model_.steps() >= s_.steps) return true;
  if (s_.duration_s > 0 && env_.now() - stats_.training_started >= s_.duration_s - 1e-12) return true;
  if (s_.epochs > 0 && model_.epochs_done() >= s_.epochs - 1e-9) return true;
  if (s_.swarm_samples && gossip_.swarm_samples() >= s_.swarm_samples) return true;
  return false;
}

double PeerLoop::lr_scale() {
  if (!s_.lr_follows_peers) return 1.0;
  const std::size_t n = 1 + gossip_.view().live_trainers();
  peak_trainers_ = std::max(peak_trainers_, n);
  return static_cast<double>(n) / static_cast<double>(peak_trainers_);
}

bool PeerLoop::eval_due() const {
  if (s_.eval_every) return model_.steps() % s_.eval_every == 0;
  return model_.epochs_done() > 0 && model_.epochs_done() >= static_cast<double>(next_epoch_eval_) - 1e-9;
}

double PeerLoop::training_pace(double floor, double untrained) const {
  const std::uint64_t st = model_.steps();
  if (!st || !(stats_.train_seconds > 0)) return untrained;
  return std::max(floor, stats_.train_seconds / static_cast<double>(st) * static_cast<double>(gossip_.local_steps_now()));
}

bool PeerLoop::idle_if_due(double interval, double exchange_every, Gossip::Partners partners) {
  const double now = env_.now();
  bool started = false;
  if (last_idle_ < 0 || now - last_idle_ >= interval - 1e-12) {
    const bool exchange = last_idle_exchange_ < 0 || now - last_idle_exchange_ >= exchange_every - 1e-12;
    started = gossip_.on_idle(exchange, partners);
    if (exchange) last_idle_exchange_ = now;
    last_idle_ = now;
  }
  return started;
}

LoopAction PeerLoop::next() {
  const double now = env_.now();
  switch (phase_) {
    case LoopPhase::Idle:
      RUMOR_CHECK(false, "PeerLoop::next() before start()");
      break;
    case LoopPhase::Joining:
      if (gossip_.join_failed()) {
        emit(ProtocolEvent::Kind::JoinFailed, 0, 0, now - phase_start_, 0, gossip_.join_failure());
        exit_code_ = 1;
        enter(LoopPhase::Exited);  // nothing trained, nothing to hand over
        return next();
      }
      if (stop_requested_) {
        enter(LoopPhase::Exited);
        return next();
      }
      // Gossip's own deadline timer ends the wait (an input): `until` is only a backstop.
      if (gossip_.joining()) return wait_until(phase_start_ + s_.gossip.join_timeout_s + 1.0);
      if (gossip_.founded()) emit(ProtocolEvent::Kind::Founded, 0, 0, s_.gossip.join_timeout_s, 0, "");
      enter(s_.min_peers > 1 ? LoopPhase::MinPeers : LoopPhase::State);
      return next();
    case LoopPhase::MinPeers: {
      const std::size_t have = gossip_.view().live_count() + 1;
      const bool timed_out = now - phase_start_ >= s_.min_peers_timeout_s - 1e-12;
      if (have < s_.min_peers && !stop_requested_ && !timed_out) return wait_until(phase_start_ + s_.min_peers_timeout_s);
      emit(ProtocolEvent::Kind::PeersInView, model_.steps(), have, now - phase_start_, 0,
           have < s_.min_peers ? "timed out" : "");
      enter(LoopPhase::State);
      return next();
    }
    case LoopPhase::State: {
      if (!gossip_.state_ready() && !stop_requested_ && now - phase_start_ < s_.state_wait_s - 1e-12)
        return wait_until(phase_start_ + s_.state_wait_s);
      begin_training();
      return next();
    }
    case LoopPhase::Training:
      return training_top();
    case LoopPhase::Settling:
      return settle_next();
    case LoopPhase::Leaving:
      if (!gossip_.left() && now - phase_start_ < s_.leave_wait_s - 1e-12) return wait_until(phase_start_ + s_.leave_wait_s);
      emit(ProtocolEvent::Kind::Departed, model_.steps(), 0, now - phase_start_, 0,
           gossip_.left() ? "" : "no neighbour confirmed the hand-over");
      enter(LoopPhase::Final);
      return next();
    case LoopPhase::Final:
      // Exchanges we started and whose responder may already have mixed: wait for them (up to
      // their deadline), or the half the responder applied is lost with us (the simulator's
      // conservation invariant found it: tests/sim/test_campaign.cpp).
      if (gossip_.exchanges_in_flight() > 0 && now - phase_start_ < s_.gossip.exchange_timeout_s - 1e-12)
        return wait_until(phase_start_ + s_.gossip.exchange_timeout_s);
      if (s_.evaluate && !final_eval_done_) {
        final_eval_done_ = true;
        LoopAction a{LoopAction::Kind::Evaluate};
        a.final = true;
        return a;
      }
      // Finished (not leaving): say so, without a hand-over; after settling our model is the swarm's.
      if (!stop_requested_ && gossip_.view().live_count() > 0) gossip_.leave(false);
      enter(LoopPhase::Exited);
      return next();
    case LoopPhase::Exited: {
      LoopAction a{LoopAction::Kind::Exit};
      a.exit_code = exit_code_;
      return a;
    }
  }
  return wait_until(now);
}

// The state wait is over (or there was none): adopt the swarm's step, start the clock of the
// stop rules, and say why when a joiner ends up with its own initialisation.
void PeerLoop::begin_training() {
  const double now = env_.now();
  const bool waited = state_pending_;
  if (const auto step = gossip_.adopted_step()) {
    model_.adopt_step(*step);
    emit(ProtocolEvent::Kind::Training, model_.steps(), *step, now - phase_start_, 0, "");
  } else if (waited) {
    emit(ProtocolEvent::Kind::Training, model_.steps(), 0, now - phase_start_, 0,
         gossip_.state_ready() ? "the swarm has not trained yet" : "timed out");
  }
  stats_.training_started = now;
  gossip_.begin_outer();  // outer momentum's anchor: the model training starts from
  enter(LoopPhase::Training);
  first_eval_pending_ = s_.evaluate && s_.evaluate_in_training;
}

LoopAction PeerLoop::training_top() {
  if (first_eval_pending_ || eval_pending_) {
    first_eval_pending_ = eval_pending_ = false;
    if (!s_.eval_every) next_epoch_eval_ = static_cast<std::uint64_t>(std::floor(model_.epochs_done() + 1e-9)) + 1;
    return LoopAction{LoopAction::Kind::Evaluate};
  }
  if (stop_requested_) return after_training();
  // A pause asked for comes before a stop rule's end of training: a driver whose script stops
  // training by its own count and then serves (the simulator's `driver = python`) pauses first.
  // (rumor-peer never pauses; the Python module has no stop rule.)
  if (pause_pending_) {
    pause_pending_ = false;
    pausing_ = true;
    gossip_.pause_outer(true);  // settling is plain averaging (core/outer.hpp)
    begin_settling(pause_s_, pause_max_s_);
    return settle_next();
  }
  if (stop_rule()) return after_training();
  if (std::isfinite(s_.gossip.staleness) && !gossip_.may_step()) {
    // The staleness bound holds: wait, handling inputs and probing the slowest members
    // (on_idle) so that their clocks reach us, until it catches up or leaves the view.
    if (!waiting_stale_) {
      waiting_stale_ = true;
      stale_since_ = env_.now();
      wait_slowest_ = gossip_.slowest_clock();
      last_idle_ = last_idle_exchange_ = -1;
    }
    idle_if_due(LoopSettings::kIdleInterval, training_pace(LoopSettings::kIdleInterval, LoopSettings::kIdleInterval));
    if (!gossip_.may_step()) return wait_until(last_idle_ + LoopSettings::kIdleInterval);
  }
  if (waiting_stale_) {
    waiting_stale_ = false;
    const double w = env_.now() - stale_since_;
    ++stats_.waits;
    stats_.wait_seconds += w;
    emit(ProtocolEvent::Kind::Wait, model_.steps(), wait_slowest_, w, 0, "");
  }
  const auto gap = static_cast<std::int64_t>(model_.steps()) - static_cast<std::int64_t>(gossip_.slowest_clock());
  stats_.max_gap = std::max(stats_.max_gap, gap);
  return LoopAction{LoopAction::Kind::Step};
}

void PeerLoop::step_done(double loss, double seconds, std::uint64_t batch_samples) {
  RUMOR_CHECK(phase_ == LoopPhase::Training, "step_done() outside training");
  stats_.train_seconds += seconds;
  stats_.interval_seconds += seconds;
  stats_.interval_samples += batch_samples;
  if (!std::isfinite(loss)) {
    stats_.diverged = true;
    exit_code_ = 1;
    emit(ProtocolEvent::Kind::Diverged, model_.steps(), 0, 0, 0, std::to_string(loss));
    stats_.training_ended = env_.now();
    gossip_.set_done();
    enter(LoopPhase::Final);  // no settling with a broken model; nothing of it is sent any more
    return;
  }
  gossip_.on_step_done(model_.steps(), model_.samples());
  if (s_.evaluate && s_.evaluate_in_training && eval_due() && !stop_rule()) eval_pending_ = true;
}

LoopAction PeerLoop::after_training() {
  if (waiting_stale_) {  // a stop rule (duration) or a stop request ended the staleness wait
    waiting_stale_ = false;
    const double w = env_.now() - stale_since_;
    ++stats_.waits;
    stats_.wait_seconds += w;
    emit(ProtocolEvent::Kind::Wait, model_.steps(), wait_slowest_, w, 0, "");
  }
  stats_.training_ended = env_.now();
  gossip_.set_done();  // our digest says so: trainers pick others first, nobody waits for our clock
  if (stop_requested_) return begin_leave();
  if (s_.settle_s > 0 && gossip_.view().live_count() > 0) {
    begin_settling(s_.settle_s, s_.settle_max_s);
    return settle_next();
  }
  enter(LoopPhase::Final);
  return next();
}

void PeerLoop::begin_settling(double settle_s, double settle_max_s) {
  enter(LoopPhase::Settling);
  settle_s_ = settle_s;
  settle_max_s_ = settle_max_s;
  settle_before_ = settle_seen_ = exchanges();
  settle_initiated_ = gossip_.stats().exact_exchanges();
  settle_close_ = 0;
  settle_interval_ = 0;
  settle_deadline_.begin(env_.now());
}

// At the pace training had (one exchange per H steps' worth of step time: ours, or the slowest
// member still training, whichever is slower), so settling costs no more bytes per second than
// training did. A pause has a deadline to end by rather than a settled state to reach, so while
// its last exchange found the models apart it exchanges at least every kSettleTickUntrained,
// so that the peers end together even where a step is slow (a Python peer's, a CNN's); once
// they are equal, at training's pace again. The backed-off interval (settle_next) comes on top.
double PeerLoop::settle_tick() const {
  const double own = training_pace(LoopSettings::kSettleMinTick, LoopSettings::kSettleTickUntrained);
  const double pace = std::max(own, gossip_.slowest_training_step() * static_cast<double>(gossip_.local_steps_now()));
  if (pausing_ && !(gossip_.stats().last_distance < LoopSettings::kSettledDistance))
    return std::min(pace, LoopSettings::kSettleTickUntrained);
  return pace;
}

LoopAction PeerLoop::begin_leave() {
  gossip_.leave();
  enter(LoopPhase::Leaving);
  return next();
}

// One pass of settling: on_idle once the interval has passed, starting an exchange only with a
// member it can change a model with (Gossip::Partners::Useful), then the end tests: time up
// (settle_s, or settle_max_s while a live peer is behind our clock; settle_s again once the
// last one caught up), nobody left, or settled (no live peer behind our clock, and
// kSettledClose exchanges in a row with (numerically) the same model, or kSettledInitiated
// initiated in float32 or the fixed codec (codec auto's compressed settling exchanges, on a link
// whose bytes are its cost, do not count: GossipStats::settle_compressed), since settling
// began or the last peer behind caught up, or no member left that an
// exchange could change). The interval starts at the tick (settle_tick) and grows kSettleBackoff-fold after each
// exchange started while a member is still training (its model is in theirs already; theirs
// reaches ours at the end) or after one that found the models equal, up to
// settle_interval_max_s; it is the tick again after one that found them apart with nobody
// training, and when the last member behind catches up.
bool PeerLoop::others_behind() const { return gossip_.slowest_clock() < model_.steps(); }

LoopAction PeerLoop::settle_next() {
  const double now = env_.now();
  const double tick = settle_tick();
  const double interval = std::max(tick, settle_interval_);
  if (exchanges() != settle_seen_) {
    settle_seen_ = exchanges();
    settle_close_ = gossip_.stats().last_distance < LoopSettings::kSettledDistance ? settle_close_ + 1 : 0;
  }
  const bool others_training = others_behind();
  if (settle_deadline_.update(now, others_training)) {
    // The last member behind our clock has caught up, and its last steps are not in our model
    // yet: settling starts afresh from here (settle_s at most, the same tests), instead of
    // ending at once for having lasted settle_s already.
    settle_initiated_ = gossip_.stats().exact_exchanges();
    settle_close_ = 0;
    settle_interval_ = 0;
  }
  // With fragments an exchange sees 1/F of the model: F times as many in a row to call it settled.
  const std::uint64_t f = gossip_.fragments();
  // Close exchanges in a row, or enough initiated, say settled unless a finished member was
  // found far from us in its last exchange (Gossip::far_finished_member): the fast peers of a
  // swarm agree among themselves within milliseconds, before one behind a slow link had its share.
  const bool counted = static_cast<std::uint64_t>(settle_close_) >= LoopSettings::kSettledClose * f ||
                       gossip_.stats().exact_exchanges() - settle_initiated_ >= LoopSettings::kSettledInitiated * f;
  const bool held = !others_training && counted && gossip_.far_finished_member();
  const bool enough = !others_training && ((counted && !held) || !gossip_.anyone_useful());
  // Enough, but an exchange we started is still open: it is settled once that is over (no new
  // one started meanwhile). The last to complete is with the peer behind the slowest link, and
  // may find it far; mixed in Final, with no exchange after, it left a fast peer of S4 with half
  // that peer's model (1-2 points below the others).
  const bool settled = enough && gossip_.exchanges_in_flight() == 0;
  const double end = settle_deadline_.end(settle_s_, settle_max_s_);
  // A pause lasts until its deadline (the driver asked for that long); settled, or alone, it
  // only stops starting exchanges. Settling after training ends there.
  const bool alone = gossip_.view().live_count() == 0;
  const bool answer_only = pausing_ && (settled || alone);
  if (!answer_only && !enough && idle_if_due(interval, interval, held ? Gossip::Partners::Far : Gossip::Partners::Useful)) {
    const bool back_off = others_training || gossip_.stats().last_distance < LoopSettings::kSettledDistance;
    settle_interval_ = back_off ? std::min(LoopSettings::kSettleBackoff * interval, std::max(s_.settle_interval_max_s, tick)) : 0;
  }
  if (pausing_ && (now >= end - 1e-12 || stop_requested_)) {
    resume_training();  // a stop request is seen there, at the top of Training
    return next();
  }
  if (!pausing_ && (now >= end - 1e-12 || alone || settled || stop_requested_)) {
    stats_.settle_behind_seconds = settle_deadline_.behind(now);
    emit(ProtocolEvent::Kind::Settled, model_.steps(), exchanges() - settle_before_, now - phase_start_,
         gossip_.stats().last_distance, "");
    if (stop_requested_) return begin_leave();
    enter(LoopPhase::Final);
    return next();
  }
  // Starting nothing (answering only, or settled but for an open exchange): until the end, or
  // whatever comes first (its reply wakes us).
  return answer_only || enough ? wait_until(end) : wait_until(std::min(last_idle_ + std::max(tick, settle_interval_), end));
}

}  // namespace rumor
