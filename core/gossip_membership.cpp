// Gossip: membership — the SWIM failure detector (direct and indirect probes), state transfer
// to joiners, and graceful leave with model hand-over. See gossip.hpp (GossipConfig) for the
// timing rules.
#include <algorithm>
#include <cstring>

#include "core/check.hpp"
#include "core/gossip.hpp"
#include "core/mix.hpp"
#include "core/serial.hpp"

namespace rumor {

namespace {
constexpr double kSnapshotLifetime = 30.0;  // a source keeps a joiner's snapshot this long
constexpr std::size_t kMaxSnapshots = 4;
}  // namespace

// ---- SWIM probes ----

void Gossip::probe() {
  // One probe at a time: a new one replaced the probe in progress before its indirect phase
  // ended (probe_timeout + probe_interval > probe_interval), so a member that stopped
  // answering was never suspected by probes (the simulator's partitions found it: no
  // suspicion in 7 s of partition; tests/sim/test_campaign.cpp).
  if (probe_) return;
  const double now = env_.now();
  const Member* target = nullptr;
  const auto consider = [&](const Member& m) {
    if (m.d.state == MemberState::Alive && now - m.last_heard > cfg_.probe_interval_s &&
        (!target || m.last_heard < target->last_heard))
      target = &m;
  };
  // Partial views probe their active view only: per-member load and detection time do not grow with n.
  if (overlay_) {
    const auto& ids = overlay_->active();
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (const Member* m = view_.find(ids[i], overlay_->active_hashes()[i])) consider(*m);
  } else {
    for (const Member& m : view_.members()) consider(m);
  }
  if (!target) return;
  probe_ = Probe{++ping_seq_, target->d.id, now};
  env_.send(target->d.id, make_message(MsgType::Ping, PingMsg{probe_->seq, digest(), {}}));
  env_.set_timer(cfg_.probe_timeout_s, timer_id(kProbeTimeout, probe_->seq));
}

// A member we hold dead may only have been out of reach (a partition that healed): each probe
// interval one of them, in turn, gets a Ping that tells it it is dead. If it is alive it refutes
// (a higher incarnation) and answers; its answer tells us, and tells it that we are here.
// Without this, two sides that declared each other dead never spoke again (split brain after a
// heal: the simulator's heal invariant found it, tests/sim/test_campaign.cpp). A seed we never
// heard of takes its turn too: a swarm cut in two while it formed (each half joined through
// the seeds it could reach) joins up once the cut heals (campaign seed 1395).
void Gossip::ping_dead() {
  std::vector<PeerId> targets;
  if (view_.dead_count() > 0)
    for (const Member& m : view_.members())
      if (m.d.state == MemberState::Dead) targets.push_back(m.d.id);
  for (const PeerId& s : seeds_)
    if (s != view_.self().id && !view_.find(s)) targets.push_back(s);
  if (targets.empty()) return;
  const PeerId to = targets[dead_ping_++ % targets.size()];
  std::vector<MemberDigest> d = digest();
  if (const Member* m = view_.find(to); m && std::none_of(d.begin(), d.end(), [&](const MemberDigest& x) { return x.id == to; }))
    d.push_back(m->d);
  env_.send(to, make_message(MsgType::Ping, PingMsg{++ping_seq_, std::move(d), {}}));
}

void Gossip::on_probe_timer(TimerKind kind, std::uint64_t seq) {
  if (kind == kProbe) {
    // Members we know are probed even before a seed answered our join: others reached us and
    // we exchange with them, so a crash among them must be noticed (a joiner whose seed had
    // crashed kept a crashed member alive for ever: campaign seed 1262).
    if (!left_ && (joined_ || view_.live_count() > 0)) {
      probe();
      ping_dead();
    }
    env_.set_timer(cfg_.probe_interval_s, timer_id(kProbe, ++timer_seq_));
    return;
  }
  if (!probe_ || probe_->seq != seq) return;
  const Member* m = view_.find(probe_->target);
  if (!m || m->d.state != MemberState::Alive || m->last_heard >= probe_->started) {
    probe_.reset();  // answered (any message counts) or already handled
    return;
  }
  if (kind == kProbeTimeout) {
    // Ask a few others to ping it for us: a slow link between us is not a dead peer.
    std::vector<PeerId> helpers;
    for (const Member& mm : view_.members())
      if (mm.d.state == MemberState::Alive && mm.d.id != probe_->target && (!overlay_ || overlay_->in_active(mm.d.id, mm.hash)))
        helpers.push_back(mm.d.id);
    for (std::size_t i = 0; i < cfg_.indirect_probes && !helpers.empty(); ++i) {
      const std::size_t j = env_.rng().below(helpers.size());
      env_.send(helpers[j], make_message(PingReqMsg{probe_->seq, probe_->target, digest()}));
      helpers.erase(helpers.begin() + static_cast<std::ptrdiff_t>(j));
    }
    env_.set_timer(cfg_.probe_interval_s, timer_id(kProbeIndirect, seq));
    return;
  }
  // kProbeIndirect: nobody heard from it during the whole probe.
  const PeerId target = probe_->target;
  probe_.reset();
  schedule_suspicion(target);
}

void Gossip::on_ping_req(const PeerId& from, const Message& msg) {
  PingReqMsg r;
  try {
    r = decode_ping_req(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  merge_view(r.view);
  heard_from(from);
  const Member* t = view_.find(r.target);
  if (!t || !t->live() || r.target == view_.self().id) return;
  if (relays_.size() > 64) relays_.erase(relays_.begin());  // bounded: a flood cannot grow it
  const std::uint64_t seq = ++ping_seq_;
  relays_[seq] = Relay{from, r.seq, r.target};
  env_.send(r.target, make_message(MsgType::Ping, PingMsg{seq, digest(), {}}));
}

// ---- State transfer ----

void Gossip::start_state_transfer(const PeerId& source) {
  // The buffer for the model is made when the first chunk to keep arrives: most joiners of a
  // swarm starting together hear step 0 and keep their own initialisation, and in the
  // simulator thousands of them wait for their first chunk at once.
  transfer_ = Transfer{next_transfer_id_++, source, 0, transfer_ ? transfer_->attempt + 1 : 1, {}};
  request_state_chunk();
}

void Gossip::request_state_chunk() {
  RUMOR_CHECK(transfer_.has_value());
  StateRequestMsg r{transfer_->id, transfer_->offset, 0, transfer_->extra, cfg_.fetch_extra_state};
  if (transfer_->extra)
    r.count = std::min<std::uint64_t>(cfg_.state_chunk_floats * sizeof(float), transfer_->extra_total - transfer_->offset);
  else
    r.count = std::min<std::uint64_t>(cfg_.state_chunk_floats, params_.size() - transfer_->offset);
  env_.send(transfer_->source, make_message(r));
  // One deadline per chunk: the timer names the transfer and the chunk it guards.
  env_.set_timer(cfg_.state_timeout_s, timer_id(kStateTimeout, (transfer_->id << 32) | state_chunk_seq()));
}

std::uint64_t Gossip::state_chunk_seq() const {
  const std::uint64_t chunk = cfg_.state_chunk_floats;
  if (!transfer_->extra) return transfer_->offset / chunk;
  return (params_.size() + chunk - 1) / chunk + transfer_->offset / (chunk * sizeof(float));
}

void Gossip::on_state_timeout(std::uint64_t tag) {
  if (!transfer_ || state_ready_) return;
  if ((tag >> 32) != transfer_->id || (tag & 0xFFFFFFFFu) != (state_chunk_seq() & 0xFFFFFFFFu)) return;
  const PeerId failed = transfer_->source;
  env_.event(ev(ProtocolEvent::Kind::ExchangeFailed, failed, "state transfer: no chunk within the deadline"));
  if (transfer_->attempt >= cfg_.state_attempts) {
    state_ready_ = true;  // give up: train from our own initialisation
    transfer_.reset();
    env_.event(ev(ProtocolEvent::Kind::StateFailed, failed, "no member delivered the model; training from our own initialisation"));
    return;
  }
  std::vector<PeerId> others;
  for (const Member& m : view_.members())
    if (m.d.state == MemberState::Alive && m.d.id != failed &&
        (!overlay_ || overlay_->ready.count(m.d.id) || overlay_->ready.empty()))  // partial views: one with a model
      others.push_back(m.d.id);
  start_state_transfer(others.empty() ? failed : others[env_.rng().below(others.size())]);
}

void Gossip::on_state_request(const PeerId& from, const Message& msg) {
  StateRequestMsg r;
  try {
    r = decode_state_request(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (r.count == 0 || r.count > (1u << 24) || (!r.extra && (r.offset > params_.size() || r.count > params_.size() - r.offset)))
    return reject(from, "state request for parameters [" + std::to_string(r.offset) + ", +" + std::to_string(r.count) +
                            ") outside the model's " + std::to_string(params_.size()));
  if (!state_ready_) return;  // we have no model worth giving yet: the joiner will retry elsewhere
  const double now = env_.now();
  for (auto it = snapshots_.begin(); it != snapshots_.end();)
    it = now - it->second.created > kSnapshotLifetime ? snapshots_.erase(it) : std::next(it);
  const auto key = std::make_pair(from, r.transfer_id);
  auto it = snapshots_.find(key);
  if (r.extra) {
    // The extra state of the snapshot the parameters came from (gone: the joiner restarts).
    if (it == snapshots_.end()) return;
    const std::shared_ptr<const Bytes> x = it->second.extra;
    const std::uint64_t size = x ? x->size() : 0;
    if (r.offset > size || r.count > size - r.offset)
      return reject(from, "state request for extra-state bytes [" + std::to_string(r.offset) + ", +" +
                              std::to_string(r.count) + ") outside the snapshot's " + std::to_string(size));
    auto chunk = std::make_shared<Bytes>(x->begin() + static_cast<std::ptrdiff_t>(r.offset),
                                         x->begin() + static_cast<std::ptrdiff_t>(r.offset + r.count));
    const StateChunkMsg c{r.transfer_id, r.offset, params_.size(), it->second.step, digest(), size, true};
    if (r.offset + r.count == size) snapshots_.erase(it);  // the last chunk: done with it
    env_.send(from, make_message(c, chunk));
    return;
  }
  if (it == snapshots_.end()) {
    ++stats_.state_served;
    if (snapshots_.size() >= kMaxSnapshots) snapshots_.erase(snapshots_.begin());
    it = snapshots_.emplace(key, Snapshot{encode_params(params_), clock_, now, extra_state_}).first;
  }
  // A request for the whole model (the usual one: chunks are large) takes the snapshot's bytes
  // as they are; a part of it is copied out.
  std::shared_ptr<const Bytes> chunk = it->second.params;
  if (r.offset != 0 || r.count != params_.size()) {
    auto part = std::make_shared<Bytes>(r.count * sizeof(float));
    std::memcpy(part->data(), it->second.params->data() + r.offset * sizeof(float), part->size());
    chunk = std::move(part);
  }
  const std::uint64_t extra_total = it->second.extra ? it->second.extra->size() : 0;
  const StateChunkMsg c{r.transfer_id, r.offset, params_.size(), it->second.step, digest(), extra_total, false};
  // The last parameter chunk: done with the snapshot, unless the joiner asks for its extra state next.
  if (r.offset + r.count == params_.size() && !(r.want_extra && extra_total > 0)) snapshots_.erase(it);
  env_.send(from, make_message(c, chunk));
}

void Gossip::on_state_chunk(const PeerId& from, const Message& msg) {
  StateChunkMsg c;
  try {
    c = decode_state_chunk(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (!transfer_ || state_ready_ || from != transfer_->source || c.transfer_id != transfer_->id ||
      c.extra != transfer_->extra)
    return;  // stale
  if (c.extra) {
    const std::uint64_t n = msg.payload_size();
    if (c.total != params_.size() || c.offset != transfer_->offset || c.extra_total != transfer_->extra_total ||
        n == 0 || n > transfer_->extra_total - c.offset)
      return reject(from, "extra-state chunk does not fit the transfer (offset " + std::to_string(c.offset) +
                              ", " + std::to_string(n) + " of " + std::to_string(c.extra_total) + " bytes)");
    heard_from(from);
    std::memcpy(transfer_->extra_buffer.data() + c.offset, msg.payload->data(), n);
    transfer_->offset += n;
    if (transfer_->offset < transfer_->extra_total) return request_state_chunk();
    return finish_state_transfer(from, "");
  }
  const std::size_t count = msg.payload_size() / sizeof(float);
  if (c.total != params_.size() || c.offset != transfer_->offset || msg.payload_size() % sizeof(float) != 0 ||
      count == 0 || count > params_.size() - c.offset)
    return reject(from, "state chunk does not fit our model (offset " + std::to_string(c.offset) + ", total " +
                            std::to_string(c.total) + ")");
  const std::span<const float> v(reinterpret_cast<const float*>(msg.payload->data()), count);
  if (!all_finite(v)) return reject(from, "non-finite parameters (NaN or Inf) in a state chunk");
  merge_view(c.view);
  heard_from(from);
  if (c.step == 0) {
    // The swarm has not trained yet (peers starting together): its model is the shared
    // initialisation, so keep ours and skip the transfer.
    state_ready_ = true;
    transfer_.reset();
    return;
  }
  if (transfer_->buffer.empty()) transfer_->buffer.resize(params_.size());
  std::copy(v.begin(), v.end(), transfer_->buffer.begin() + static_cast<std::ptrdiff_t>(c.offset));
  transfer_->offset += count;
  transfer_->step = c.step;
  if (transfer_->offset < params_.size()) return request_state_chunk();
  std::string note;
  if (cfg_.fetch_extra_state && c.extra_total > 0) {
    if (c.extra_total <= max_extra_state_bytes()) {
      // The model is in; now the source's extra state of the same snapshot.
      transfer_->extra = true;
      transfer_->offset = 0;
      transfer_->extra_total = c.extra_total;
      transfer_->extra_buffer.assign(c.extra_total, 0);
      return request_state_chunk();
    }
    note = "the source's extra state (" + std::to_string(c.extra_total) + " bytes) is over the limit of " +
           std::to_string(max_extra_state_bytes()) + ": not taken";
  }
  finish_state_transfer(from, std::move(note));
}

void Gossip::finish_state_transfer(const PeerId& from, std::string note) {
  std::copy(transfer_->buffer.begin(), transfer_->buffer.end(), params_.begin());
  ++model_version_;
  const std::uint64_t step = transfer_->step;
  if (transfer_->extra) received_extra_ = std::make_shared<const Bytes>(std::move(transfer_->extra_buffer));
  adopted_step_ = step;
  clock_ = step;
  view_.self().clock = step;
  state_ready_ = true;
  ProtocolEvent e = ev(ProtocolEvent::Kind::StateReceived, from, std::move(note));
  e.other = step;
  transfer_.reset();
  env_.event(e);
}

// ---- Graceful leave ----

void Gossip::leave(bool handover) {
  if (leaving_) return;
  leaving_ = true;
  view_.self().state = MemberState::Left;
  std::vector<PeerId> alive;
  for (const Member& m : view_.members())
    if (m.d.state == MemberState::Alive) alive.push_back(m.d.id);
  if (alive.empty() || !state_ready_) {
    left_ = true;
    return;
  }
  // Announce to a few members (the view digests spread it further) and hand the model to one.
  const PeerId target = handover ? alive[env_.rng().below(alive.size())] : PeerId{};
  LeaveMsg note{0, clock_, my_weight(), params_.size(), digest()};
  std::size_t told = 0;
  for (const auto& id : alive)
    if (id != target && told++ < 8) env_.send(id, make_message(note, nullptr));
  if (handover)
    send_leave(target);
  else
    left_ = true;
}

void Gossip::send_leave(const PeerId& to) {
  leave_target_ = to;
  ++leave_attempts_;
  leave_seq_ = ++ping_seq_;
  LeaveMsg m{leave_seq_, clock_, my_weight(), params_.size(), digest()};
  env_.send(to, make_message(m, encode_params(params_)));
  env_.set_timer(cfg_.leave_timeout_s, timer_id(kLeaveTimeout, leave_seq_));
}

void Gossip::on_leave(const PeerId& from, const Message& msg) {
  LeaveMsg l;
  try {
    l = decode_leave(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (l.view.empty() || l.view.front().id != from || l.view.front().state != MemberState::Left)
    return reject(from, "leave message that does not announce its sender's leave");
  if (msg.payload) {  // hand-over: validate before anything changes
    std::span<const float> theirs;
    try {
      theirs = payload_floats(msg, l.param_count);
    } catch (const DecodeError& e) {
      return reject(from, e.what());
    }
    if (l.param_count != params_.size()) return reject(from, "hand-over of a model with another parameter count");
    if (!all_finite(theirs)) return reject(from, "non-finite parameters (NaN or Inf) in a hand-over");
    if (!(l.weight > 0) || !std::isfinite(l.weight)) return reject(from, "bad mixing weight");
    merge_view(l.view);
    give_up_on_leaver(from);
    if (state_ready_ && !leaving_) {
      // Take over its work: the weighted average of the two models.
      const double a = my_weight(), b = l.weight;
      const std::vector<float> mine(params_.begin(), params_.end());
      stats_.last_distance = relative_distance(mine, theirs);
      mix_into(params_, theirs, mine, b / (a + b));
      if (!(stats_.last_distance < kAgreeDistance)) ++model_version_;
      ProtocolEvent e = ev(ProtocolEvent::Kind::Handover, from);
      e.distance = stats_.last_distance;
      e.other = l.clock;
      env_.event(e);
      env_.send(from, make_message(MsgType::LeaveAck, PingMsg{l.seq, digest(), {}}));
    }
    return;
  }
  merge_view(l.view);
  give_up_on_leaver(from);
}

void Gossip::give_up_on_leaver(const PeerId& leaver) {
  // A member that left answers nothing more: an exchange we started with it and that it has not
  // accepted will never be (a finished peer announces its leave once it is done, possibly with
  // our request unanswered in its inbox). Give it up now rather than at its deadline: it holds
  // one of our max_in_flight slots, and settling waits on it. Only on the leaver's own Leave,
  // though: on its link, what it sent before (a reply, an accept) came first, so nothing was
  // mixed on its side. News through a third member's digest can overtake its reply or accept,
  // and the half the leaver applied would be lost (the simulator's conservation invariant found
  // it: campaign seeds 93 and 150, tests/sim/test_campaign.cpp): that news gives nothing up. The
  // leaver's own Leave does even when that news came first (testbed S4: the peer at home heard
  // of a fast peer's leave from another 0.5 s before the fast peer's Leave, queued behind its
  // reply on the 10 Mbit link, and waited out its deadline).
  if (const std::size_t i = find_out(leaver); i != static_cast<std::size_t>(-1) && !out_[i].accepted)
    decline_exchange(i, "the peer left the swarm");
}

void Gossip::on_leave_ack(const PeerId& from, const Message& msg) {
  PingMsg p;
  try {
    p = decode_ping(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (leaving_ && p.seq == leave_seq_ && from == leave_target_) left_ = true;
}

}  // namespace rumor
