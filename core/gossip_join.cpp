// Gossip: joining through seeds (with a deadline) and merging piggybacked membership.
#include <sstream>

#include "core/gossip.hpp"
#include "core/serial.hpp"

namespace rumor {

void Gossip::send_join_requests() {
  JoinRequestMsg j{view_.self(), fingerprint_};
  for (const auto& s : seeds_) env_.send(s, make_message(j));
}

// Nobody we know of means nobody answered and nobody reached us: the view holds every member
// ever learnt (tombstones included), whatever message brought it.
bool Gossip::joining() const {
  return !joined_ && !join_deadline_passed_ && view_.members().empty();
}

// GossipConfig::join_timeout_s elapsed (armed by start() only while joining).
void Gossip::on_join_deadline() {
  join_deadline_passed_ = true;
  if (joined_ || !view_.members().empty()) return;  // in a swarm already
  if (self_seeded_) {
    // A founder alone: the others of the seed list are not up (yet). Start the swarm with our
    // own model; the JoinRequests go on, so a seed that comes up later merges in.
    founded_ = true;
    if (!transfer_) state_ready_ = true;
    return;
  }
  join_failed_ = true;  // the retry timer stops resending
}

std::string Gossip::join_failure() const {
  std::ostringstream o;
  o << "could not join through ";
  for (std::size_t i = 0; i < seeds_.size(); ++i) o << (i ? "," : "") << seeds_[i];
  o << " within " << cfg_.join_timeout_s << " s: ";
  for (std::size_t i = 0; i < seeds_.size(); ++i) {
    const auto it = join_errors_.find(seeds_[i]);
    o << (i ? "; " : "") << seeds_[i] << ": " << (it != join_errors_.end() ? it->second : "no answer");
  }
  return o.str();
}

void Gossip::on_join_request(const PeerId& from, const Message& msg) {
  JoinRequestMsg j;
  try {
    j = decode_join_request(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (j.fingerprint != fingerprint_)
    return reject(from, "model fingerprint mismatch: ours '" + fingerprint_ + "', theirs '" + j.fingerprint + "'");
  if (j.self.id != from) return reject(from, "join request names another peer (" + j.self.id + ")");
  merge_view({j.self});
  heard_from(from);
  maybe_go_partial();
  if (overlay_) {
    // Partial views: link the joiner, send its walks, and give it our views (not the swarm).
    overlay_join(from);
    JoinReplyMsg r{{view_.self()}, true, std::max<std::uint64_t>(size_hint_, view_.live_count() + 1)};
    for (const auto* ids : {&overlay_->active(), &overlay_->passive()})
      for (const auto& id : *ids)
        if (const Member* m = view_.find(id)) r.members.push_back(m->d);
    env_.send(from, make_message(r));
    return;
  }
  JoinReplyMsg r{view_.digest(1024, env_.rng())};
  env_.send(from, make_message(r));
}

void Gossip::on_join_reply(const PeerId& from, const Message& msg) {
  JoinReplyMsg r;
  try {
    r = decode_join_reply(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (r.partial && cfg_.view != ViewMode::Full) go_partial(r.size_hint);
  if (overlay_) {
    for (const MemberDigest& d : r.members) overlay_learn(d);
    // The walks' ends link us (and give us the model): no requests of our own before the
    // first shuffle tick, or all joiners through this seed would ask the same few members.
  }
  merge_view(r.members);
  heard_from(from);
  if (!joined_) {
    joined_ = true;
    env_.event(ev(ProtocolEvent::Kind::Joined, from));
    if (!state_ready_ && !transfer_) {
      if (!overlay_ || r.members.empty() || r.members.front().clock == 0) {
        // (Partial views too when the seed has not stepped: the swarm is starting together
        // and the transfer only confirms that its model is the shared initialisation.)
        start_state_transfer(from);
      } else {
        // Partial views: the model comes from a neighbour the join walks bring (one of
        // thousands of joiners through one seed must not all fetch from the seed), or from an
        // active member if none has come within state_timeout_s (kOverlayState).
        env_.set_timer(cfg_.state_timeout_s, timer_id(kOverlayState, ++timer_seq_));
      }
    }
  }
}

void Gossip::on_ping(const PeerId& from, const Message& msg) {
  PingMsg p;
  try {
    p = decode_ping(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  merge_view(p.view);
  heard_from(from);
  if (msg.type == MsgType::Ping) {
    env_.send(from, make_message(MsgType::Ack, PingMsg{p.seq, digest(), {}}));
    return;
  }
  // An Ack. Relayed for our indirect probe: the target is alive.
  if (!p.about.empty() && p.about != view_.self().id) heard_from(p.about);
  // The answer to a ping we sent for someone else's indirect probe: relay it.
  if (auto it = relays_.find(p.seq); it != relays_.end() && it->second.target == from) {
    env_.send(it->second.requester, make_message(MsgType::Ack, PingMsg{it->second.their_seq, digest(), from}));
    relays_.erase(it);
  }
}

void Gossip::merge_view(const std::vector<MemberDigest>& digests) {
  const double now = env_.now();
  constexpr std::size_t kFreshPerMessage = 2;
  std::size_t learnt = 0;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const MemberDigest& d = digests[i];
    if (d.id == view_.self().id) {
      // Somebody thinks we are suspect or dead: refute with a higher incarnation (SWIM).
      MemberDigest& me = view_.self();
      if (d.state != MemberState::Alive && d.incarnation >= me.incarnation && d.incarnation <= kMaxIncarnation)
        me.incarnation = d.incarnation + 1;
      continue;
    }
    const std::size_t h = View::hash_of(d.id);
    Member* known = view_.find(d.id, h);
    if (overlay_ && !known) {
      // Partial views keep only their members: news of others is not ours to hold, except
      // the sender's own digest (first: a peer that reached us is a passive candidate) and up
      // to kFreshPerMessage others, which keep the passive view a fresh random sample of the
      // swarm between shuffles (as Cyclon's exchanges do). Not fewer: with one, 10,000 peers
      // averaged twice as slowly in the middle of a run, which n = 200 does not show
      // (docs/sim.md "Partial views").
      if (i == 0 || (learnt < kFreshPerMessage && d.state == MemberState::Alive)) {
        learnt += i > 0;
        overlay_learn(d, nullptr, h);
      }
      continue;
    }
    if (auto c = view_.merge(d, now, known, nullptr, h)) report_change(*c);
  }
  if (!overlay_ && cfg_.view == ViewMode::Auto && view_.live_count() + 1 > cfg_.view_threshold) go_partial(0);
}

void Gossip::report_change(const View::Change& c) {
  using K = ProtocolEvent::Kind;
  switch (c.after) {
    case MemberState::Alive:
      if (!c.before || *c.before == MemberState::Dead || *c.before == MemberState::Left)
        env_.event(ev(K::Join, c.id));
      break;
    case MemberState::Suspect:
      if (!c.before) env_.event(ev(K::Join, c.id));
      env_.event(ev(K::Suspect, c.id));
      // Our own check of it, wherever the suspicion came from: one learnt from a digest had
      // none, and stayed Suspect for ever in a quiet view (campaign seed 252).
      env_.set_timer(cfg_.suspect_timeout_s, timer_id(kSuspectCheck, ++timer_seq_));
      if (overlay_) {
        // Repair the active view at once; tell it, so the link is gone on both sides if it lives.
        if (overlay_->in_active(c.id)) {
          OverlayMsg d;
          d.kind = OverlayKind::Disconnect;
          overlay_send(c.id, std::move(d));
        }
        overlay_lost(c.id, false);
      }
      break;
    case MemberState::Dead:
      if (c.before) env_.event(ev(K::Dead, c.id));
      if (overlay_) overlay_lost(c.id, true);
      break;
    case MemberState::Left: {
      if (c.before) env_.event(ev(K::Leave, c.id));
      // An exchange with it is given up on its own Leave only (Gossip::give_up_on_leaver).
      if (overlay_) overlay_lost(c.id, true);
      break;
    }
  }
}

}  // namespace rumor
