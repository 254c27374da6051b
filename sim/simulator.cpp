// The simulator's engine (see simulator.hpp for the model; simulation_impl.hpp for the files):
// construction, churn, events in (time, sequence) order, stepping and the public face.
#include "sim/simulation_impl.hpp"

namespace rumor::sim {

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

Simulation::Impl::Impl(const Scenario& sc)
    : s(sc), churn_rng(Rng(sc.seed).fork(streams::kChurn)), fault_rng(Rng(sc.seed).fork(streams::kFaults)) {
  RUMOR_CHECK(aligned_heap());
  // Eigen's own threads would make the sums' order depend on timing. Only written when it
  // differs: sweeps construct simulations on two threads at once (run_sweep sets it first).
  if (math_threads() != 1) set_math_threads(1);
  // Stop rules (the scenario applied core's defaults: 5 epochs of a model being trained).
  const bool told = s.loop.steps || (s.training && s.loop.epochs > 0) || s.loop.duration_s > 0 ||
                    (s.training && (s.loop.swarm_samples || s.loop.swarm_epochs > 0));
  if (!told && s.duration <= 0)
    throw ScenarioError(s.source + ": workload: say when peers stop: workload.steps, workload.duration, "
                        "workload.swarm_epochs, workload.swarm_samples or run.duration");
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
  fault_side.assign(s.total_ids, 0);
  if (s.faults[FaultPoint::Partition] > 0) schedule_partition();
  for (Peer& p : peers) update_cpu(p);
  xbar.resize(work->param_count());
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
      // With faults.restart on, a crash of the scenario is a crash like a fault's (it may restart).
      if (s.faults[FaultPoint::Restart] > 0) return fault_crash(p, FaultPoint::Count);
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
      p.has_checkpoint = false;
      p.state = PeerState::Pending;
      p.side.reset();
      p.model.reset();
      net->reset_peer(p.index);
      log(p, p.life ? "restart" : "join", "", 0, 0, a.where);
      schedule(now + s.classes[p.cls].start, EventKind::Start, p.index, p.life);
      return;
  }
}

// ---------------------------------------------------------------- faults (sim/faults.hpp)

// A crash at a protocol step (the peer sent a message of that step in this very event, so it
// vanishes right after: as a SIGKILL between two lines of its handler would leave things).
void Simulation::Impl::fault_crash(Peer& p, FaultPoint why) {
  if (!(p.running() || p.state == PeerState::Pending)) return;
  ++totals.crashes;
  log(p, "crash", "", peer_steps(p), 0, why == FaultPoint::Count ? std::string("churn") : std::string("fault ") + fault_name(why));
  // What a checkpoint would give a restart: the model and the step it had.
  const bool restart = p.model && fire(FaultPoint::Restart);
  if (restart) {
    const auto x = p.model->params();
    p.checkpoint.assign(x.begin(), x.end());
    p.checkpoint_step = peer_steps(p);
    p.has_checkpoint = true;
  }
  p.state = PeerState::Crashed;
  ++p.life;
  drop_process(p);
  p.side.reset();
  p.model.reset();
  if (restart) {
    ++restarts_left;
    schedule(now + s.faults.restart_after * fault_rng.uniform(0.5, 1.5), EventKind::Fault, p.index, p.life, kFaultRestart);
  }
}

void Simulation::Impl::schedule_partition() {
  const double rate = s.faults[FaultPoint::Partition];
  schedule(now + fault_rng.exponential(rate), EventKind::Fault, 0, 0, kPartitionStart);
}

void Simulation::Impl::fault_event(const Event& e) {
  Peer& p = peers[e.peer];
  switch (e.arg & 0xff) {
    case kFaultCrash:
      return fault_crash(p, static_cast<FaultPoint>(e.arg >> 8));
    case kFaultRestart:
      --restarts_left;
      if (p.state != PeerState::Crashed) return;
      ++totals.joins;
      p.state = PeerState::Pending;
      net->reset_peer(p.index);
      log(p, "restart", "", p.checkpoint_step, 0, "fault restart from its model");
      schedule(now + s.classes[p.cls].start, EventKind::Start, p.index, p.life);
      return;
    case kStallEnd:
      if (!p.running() || !p.stalled) return;
      p.busy = false;
      if (!s.training) drain(p);
      if (!p.running()) return;
      return begin_step(p);
    case kPartitionStart: {
      if (active == 0 && churn_left == 0 && restarts_left == 0) return;
      if (partition_until < now) {
        std::vector<std::uint32_t> live;
        for (const Peer& q : peers)
          if (q.running()) live.push_back(q.index);
        if (live.size() >= 2) {
          ++fault_counts[static_cast<std::size_t>(FaultPoint::Partition)];
          fault_rng.shuffle(live);
          const std::size_t cut = 1 + fault_rng.below(live.size() - 1);
          std::fill(fault_side.begin(), fault_side.end(), 0);
          for (std::size_t k = 0; k < live.size(); ++k) fault_side[live[k]] = k < cut ? 1 : 2;
          partition_until = now + s.faults.partition_max * fault_rng.uniform(0.2, 1.0);
          log(peers[live[0]], "partition", "", 0, partition_until - now,
              fmt::format("fault partition: {} | {} live peers until {:.6f}", cut, live.size() - cut, partition_until));
          schedule(partition_until, EventKind::Fault, 0, 0, kPartitionHeal);
        }
      }
      return schedule_partition();
    }
    case kPartitionHeal:
      if (partition_until > now) return;
      last_heal = now;
      ++partitions_healed;
      std::fill(fault_side.begin(), fault_side.end(), 0);
      log(peers[0], "heal", "", 0, 0, "fault partition healed");
      return;
  }
}

// ---------------------------------------------------------------- engine

void Simulation::Impl::process(const Event& e) {
  RUMOR_CHECK(e.t >= now, "events must come in time order");
  now = e.t;
  ++totals.events;
  last_peer = e.kind == EventKind::Churn || (e.kind == EventKind::Fault && e.peer == 0 && ((e.arg & 0xff) == kPartitionStart || (e.arg & 0xff) == kPartitionHeal)) ? -1 : e.peer;
  if (e.kind == EventKind::Churn) {
    --churn_left;
    return churn(s.churn[e.arg]);
  }
  if (e.kind == EventKind::Fault && ((e.arg & 0xff) == kPartitionStart || (e.arg & 0xff) == kPartitionHeal))
    return fault_event(e);
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
    case EventKind::Respond:
      // The evaluation goes on; inputs are handled as they come until it ends (offer).
      if (p.running() && p.busy) {
        p.busy = false;
        drain(p);
      }
      break;
    case EventKind::Resume:
      if (p.running()) {
        log_eval(p);
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
    case EventKind::Fault:
      fault_event(e);
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
  const bool over = !std::isfinite(end) && active == 0 && churn_left == 0 && restarts_left == 0;
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
    if (checker) checker->after_event(*owner, last_peer);
    if (after_event) after_event(*owner);
    return Progress::Event;
  }
  // Nothing is left before the end: a last sample at the end time (or the last event).
  const double t_end = std::isfinite(end) ? end : now;
  if (t_end > limit) return Progress::Limit;
  now = std::max(now, t_end);
  if (samples.empty() || samples.back().time < now - 1e-12) record_sample(now);
  ended = true;
  if (checker) checker->at_end(*owner);
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

// ---------------------------------------------------------------- public face

Simulation::Simulation(const Scenario& s) : impl_(std::make_unique<Impl>(s)) {
  impl_->owner = this;
  if (s.check_invariants) check_invariants();
}

std::uint32_t Simulation::life(std::uint32_t peer) const { return impl_->peers.at(peer).life; }
bool Simulation::resumed(std::uint32_t peer) const { return impl_->peers.at(peer).resumed; }
double Simulation::started_at(std::uint32_t peer) const { return impl_->peers.at(peer).started_at; }
double Simulation::last_heal() const { return impl_->last_heal; }
bool Simulation::partitioned_now() const { return impl_->partition_until > impl_->now; }
const FaultCounts& Simulation::fault_counts() const { return impl_->fault_counts; }
void Simulation::check_invariants() {
  if (!impl_->checker) impl_->checker = std::make_unique<InvariantChecker>(impl_->s);
}
const InvariantChecker* Simulation::invariants() const { return impl_->checker.get(); }
InvariantChecker* Simulation::invariants() { return impl_->checker.get(); }

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


}  // namespace rumor::sim
