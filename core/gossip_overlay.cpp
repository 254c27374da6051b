// Gossip: partial views, HyParView style (Leitao, Pereira and Rodrigues, DSN 2007). The
// bookkeeping is core/overlay.hpp; this file is the protocol around it:
//  - join: the seed links the joiner into its active view and sends ForwardJoin to each other
//    active member; each walks kActiveWalk hops through active views (recording the joiner in
//    a passive view at hop kPassiveWalk) and its last hop asks the joiner to be its neighbour.
//    The joiner fetches the model from the first such neighbour that has one (spread over the
//    swarm: no member serves all joiners), or from an active member after state_timeout_s.
//  - links are symmetric: Neighbor -> NeighborAccept (both sides active) or NeighborReject;
//    a member that makes room sends Disconnect to the one it drops (kept as passive).
//  - repair: a member suspected, dead, left or unreachable leaves the active view at once and
//    Neighbor requests go to random passive members until the view is full again.
//  - shuffle: every shuffle_interval_s a sample (us, 3 active, 4 passive) walks kShuffleWalk
//    hops; the walk's end answers with as many of its passive members, and both take the
//    other's into their passive views.
//  - View holds only the members of the two views (plus exchanges in progress and recent
//    tombstones): overlay_trim erases the rest, and merge_view ignores digests of members we
//    do not know, except the sender's own. Memory per peer is O(active + passive).
#include <algorithm>
#include <cmath>

#include "core/gossip.hpp"
#include "core/serial.hpp"

namespace rumor {

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
constexpr std::uint8_t kActiveWalk = 6;   // HyParView's ARWL
constexpr std::uint8_t kPassiveWalk = 3;  // PRWL
constexpr std::uint8_t kShuffleWalk = 4;
constexpr std::size_t kShuffleActive = 3, kShufflePassive = 4;
constexpr double kBuriedFor = 60.0;  // seconds a dead member's stale digests are not taken back
}  // namespace

void Gossip::overlay_send(const PeerId& to, OverlayMsg m) {
  m.ready = state_ready_ && joined_;
  m.view = digest();
  ++stats_.overlay_sent;
  env_.send(to, make_message(m));
}

void Gossip::maybe_go_partial(std::uint64_t hint) {
  if (overlay_ || cfg_.view == ViewMode::Full) return;
  if (cfg_.view == ViewMode::Partial || view_.live_count() + 1 > cfg_.view_threshold || hint > cfg_.view_threshold)
    go_partial(hint);
}

void Gossip::go_partial(std::uint64_t hint) {
  if (overlay_) return;
  size_hint_ = std::max<std::uint64_t>({size_hint_, hint, view_.live_count() + 1});
  const std::size_t k =
      cfg_.active_view ? cfg_.active_view : default_active_view(std::max<std::uint64_t>(size_hint_, cfg_.view_threshold));
  const std::size_t p = cfg_.passive_view ? cfg_.passive_view : 6 * k;
  overlay_ = std::make_unique<Overlay>(k, p);
  // The members we know become candidates: a random `p` of them the passive view, the rest
  // are forgotten. The active view is then built by Neighbor requests (links are symmetric).
  std::vector<PeerId> alive;
  for (const Member* m : view_.alive()) alive.push_back(m->d.id);
  env_.rng().shuffle(alive);
  if (alive.size() > p) alive.resize(p);
  for (const auto& id : alive) overlay_->add_passive(id, env_.rng());
  overlay_trim();
  overlay_fill();
  env_.set_timer(cfg_.shuffle_interval_s, timer_id(kShuffle, ++timer_seq_));
}

void Gossip::overlay_learn(const MemberDigest& d) {
  if (!overlay_ || d.id == view_.self().id) return;
  const std::size_t h = View::hash_of(d.id);
  overlay_learn(d, view_.find(d.id, h), h);
}

void Gossip::overlay_learn(const MemberDigest& d, Member* known, std::size_t hash) {
  if (!known) {
    if (d.state != MemberState::Alive) return;  // news of a member we do not hold: not ours to keep
    const auto b = overlay_->buried.find(d.id);
    if (b != overlay_->buried.end() && env_.now() - b->second < kBuriedFor) return;
  }
  const Member* m = known;
  Member* added = nullptr;
  if (auto c = view_.merge(d, env_.now(), known, &added, hash)) {
    report_change(*c);
    // A member newly learnt (Alive: others return above) only reports its join; any other
    // change may forget members (a repair), so it is looked up again.
    m = added ? added : view_.find(d.id, hash);
  }
  // (add_passive leaves an active member where it is.)
  std::size_t dropped_hash = 0;
  if (m && m->d.state == MemberState::Alive)
    if (auto dropped = overlay_->add_passive(d.id, hash, env_.rng(), &dropped_hash)) overlay_forget(*dropped, dropped_hash);
  if (view_.members().size() > 2 * (overlay_->active_cap() + overlay_->passive_cap()) + 16) overlay_trim();
}

bool Gossip::overlay_in_use(const PeerId& id, const Member& m, std::size_t hash) const {
  if (overlay_->in_views(id, hash)) return true;
  if (!m.live() && overlay_->buried.count(id)) return true;  // a recent tombstone: keeps stale gossip out
  if (find_out(id) != npos || answering(id)) return true;
  if ((transfer_ && transfer_->source == id) || (probe_ && probe_->target == id)) return true;
  return leaving_ && id == leave_target_;
}

void Gossip::overlay_forget(const PeerId& id) { overlay_forget(id, View::hash_of(id)); }

void Gossip::overlay_forget(const PeerId& id, std::size_t hash) {
  if (Member* m = view_.find(id, hash); m && !overlay_in_use(id, *m, hash)) view_.erase(m);
}

void Gossip::overlay_link(const PeerId& id) {
  if (!overlay_ || id == view_.self().id) return;
  if (auto dropped = overlay_->add_active(id, env_.rng())) {
    OverlayMsg d;
    d.kind = OverlayKind::Disconnect;
    overlay_send(*dropped, std::move(d));
  }
}

void Gossip::overlay_fill() {
  if (!overlay_ || leaving_ || left_) return;
  const double now = env_.now();
  if (overlay_->active().size() + overlay_->pending.size() >= overlay_->active_cap()) return;
  // The candidates are found once: each request sent only makes its member pending, which
  // takes it out of the list (in place, so that the draws are those of a list made afresh).
  std::vector<PeerId> candidates;
  const auto& passive = overlay_->passive();
  for (std::size_t i = 0; i < passive.size(); ++i) {
    const PeerId& id = passive[i];
    if (overlay_->pending.count(id)) continue;
    const auto d = overlay_->declined.find(id);
    if (d != overlay_->declined.end() && d->second > now) continue;
    const Member* m = view_.find(id, overlay_->passive_hashes()[i]);
    if (m && m->d.state == MemberState::Alive && m->skip_until <= now) candidates.push_back(id);
  }
  while (overlay_->active().size() + overlay_->pending.size() < overlay_->active_cap()) {
    if (candidates.empty()) return;
    const auto pick = candidates.begin() + static_cast<std::ptrdiff_t>(env_.rng().below(candidates.size()));
    const PeerId id = *pick;
    candidates.erase(pick);
    overlay_->pending[id] = now;
    OverlayMsg n;
    n.kind = OverlayKind::Neighbor;
    n.priority = overlay_->active().empty();
    overlay_send(id, std::move(n));
  }
}

void Gossip::overlay_lost(const PeerId& id, bool dead) {
  if (!overlay_) return;
  bool was_active = false;
  if (dead) {
    was_active = overlay_->in_active(id);
    overlay_->remove(id);
    overlay_->buried[id] = env_.now();
  } else {
    was_active = overlay_->demote(id, env_.rng());
    overlay_->pending.erase(id);
  }
  if (was_active || overlay_->active().size() + overlay_->pending.size() < overlay_->active_cap()) overlay_fill();
}

std::vector<MemberDigest> Gossip::overlay_sample(bool with_active) {
  std::vector<MemberDigest> out;
  const auto add = [&](const std::vector<PeerId>& ids) {
    for (const auto& id : ids)
      if (const Member* m = view_.find(id); m && m->d.state == MemberState::Alive) out.push_back(m->d);
  };
  if (with_active) add(overlay_->sample_active(kShuffleActive, env_.rng()));
  add(overlay_->sample_passive(with_active ? kShufflePassive : kShuffleActive + kShufflePassive + 1, env_.rng()));
  return out;
}

void Gossip::overlay_accept_sample(const std::vector<MemberDigest>& sample) {
  for (const MemberDigest& d : sample)
    if (d.state == MemberState::Alive) overlay_learn(d);
}

void Gossip::overlay_shuffle() {
  if (!overlay_) return;
  if (joined_ && !leaving_ && !left_) {
    const double now = env_.now();
    // Neighbor requests that got no answer: that candidate is gone (a live one answers).
    std::vector<PeerId> silent;
    for (const auto& [id, t] : overlay_->pending)
      if (now - t > cfg_.exchange_timeout_s) silent.push_back(id);
    for (const auto& id : silent) overlay_->remove(id);
    overlay_->declined.erase_if([&](const auto& x) { return x.second <= now; });
    overlay_fill();
    const PeerId target = overlay_->random_active(env_.rng());
    if (!target.empty()) {
      OverlayMsg s;
      s.kind = OverlayKind::Shuffle;
      s.ttl = kShuffleWalk;
      s.subject = view_.self();
      s.peers = overlay_sample(true);
      overlay_send(target, std::move(s));
    }
    overlay_trim();
  }
  env_.set_timer(cfg_.shuffle_interval_s, timer_id(kShuffle, ++timer_seq_));
}

void Gossip::overlay_trim() {
  if (!overlay_) return;
  const double now = env_.now();
  overlay_->buried.erase_if([&](const auto& x) { return now - x.second > kBuriedFor; });
  while (overlay_->buried.size() > overlay_->passive_cap()) {
    auto oldest = overlay_->buried.begin();
    for (auto it = overlay_->buried.begin(); it != overlay_->buried.end(); ++it)
      if (it->second < oldest->second) oldest = it;
    overlay_->buried.erase(oldest);
  }
  std::vector<PeerId> drop;
  for (const Member& m : view_.members())
    if (!overlay_in_use(m.d.id, m, m.hash)) drop.push_back(m.d.id);
  for (const auto& id : drop) view_.erase(id);
}

std::optional<PeerId> Gossip::overlay_partner(Partners partners) {
  const double now = env_.now();
  ++partner_draws_;
  const bool fresh = cfg_.fresh_every > 0 && partner_draws_ % cfg_.fresh_every == 0;
  std::vector<PeerId> good, finished;
  bool anyone_preferred = false;
  const auto preferred = [](const Member& m) { return !m.d.done && !m.screened; };
  const auto usable = [&](const PeerId& id, const Member& m) {
    return m.skip_until <= now && find_out(id) == npos && !answering(id) && partner_fits(m, partners);
  };
  const auto scan = [&](const std::vector<PeerId>& ids, const std::vector<std::size_t>& hashes) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const PeerId& id = ids[i];
      const Member* m = view_.find(id, hashes[i]);
      if (!m || m->d.state != MemberState::Alive) continue;
      anyone_preferred = anyone_preferred || preferred(*m);
      if (usable(id, *m)) (preferred(*m) ? good : finished).push_back(id);
    }
  };
  const std::vector<PeerId>& first = fresh ? overlay_->passive() : overlay_->active();
  const std::vector<std::size_t>& first_h = fresh ? overlay_->passive_hashes() : overlay_->active_hashes();
  // Most members are good: a few random draws find one without looking up the whole view (a
  // partner drawn this way is uniform over the good ones, as below); only when they all miss
  // is the view scanned (and then the other view).
  for (int tries = 0; tries < 4 && !first.empty(); ++tries) {
    const std::size_t i = env_.rng().below(first.size());
    const PeerId& id = first[i];
    const Member* m = view_.find(id, first_h[i]);
    if (m && m->d.state == MemberState::Alive && preferred(*m) && usable(id, *m)) return id;
  }
  scan(first, first_h);
  if (good.empty())
    fresh ? scan(overlay_->active(), overlay_->active_hashes()) : scan(overlay_->passive(), overlay_->passive_hashes());
  if (!good.empty()) return good[env_.rng().below(good.size())];
  if (!anyone_preferred && !finished.empty()) return finished[env_.rng().below(finished.size())];
  return std::nullopt;
}

void Gossip::overlay_join(const PeerId& joiner) {
  const Member* j = view_.find(joiner);
  if (!j) return;
  const MemberDigest jd = j->d;
  for (const auto& a : std::vector<PeerId>(overlay_->active()))
    if (a != joiner) {
      OverlayMsg f;
      f.kind = OverlayKind::ForwardJoin;
      f.ttl = kActiveWalk;
      f.subject = jd;
      overlay_send(a, std::move(f));
    }
  // Unlike HyParView's contact node, the seed links the joiner only if it has room: a burst of
  // joiners through one seed would otherwise fill its active view with joiners, and the walks
  // of the later ones would wander among joiners that have no model to give.
  if (!overlay_->active_full()) {
    overlay_->pending[joiner] = env_.now();
    OverlayMsg n;
    n.kind = OverlayKind::Neighbor;
    n.priority = true;
    overlay_send(joiner, std::move(n));
  }
}

bool Gossip::is_seed(const PeerId& id) const { return std::find(seeds_.begin(), seeds_.end(), id) != seeds_.end(); }

PeerId Gossip::overlay_state_source() {
  // A member has a model to give if it said so, or if its clock moved (a joiner steps only
  // once it has one): an active one first, else a passive one (the seed's views, from its
  // JoinReply: spread over its neighbourhood rather than all on the seed).
  // Not a seed: every joiner knows it, so it would serve them all (hivemind #169).
  const auto has_model = [&](const PeerId& id) {
    const Member* m = view_.find(id);
    return m && m->d.state == MemberState::Alive && (overlay_->ready.count(id) || m->d.clock > 0) && !is_seed(id);
  };
  for (const auto* ids : {&overlay_->active(), &overlay_->passive()}) {
    std::vector<PeerId> ready;
    for (const auto& id : *ids)
      if (has_model(id)) ready.push_back(id);
    if (!ready.empty()) return ready[env_.rng().below(ready.size())];
  }
  return PeerId{};
}

void Gossip::on_overlay(const PeerId& from, const Message& msg) {
  OverlayMsg o;
  try {
    o = decode_overlay(msg);
  } catch (const DecodeError& e) {
    return reject(from, e.what());
  }
  if (o.view.front().id != from) return reject(from, "Overlay message whose first digest is not its sender's");
  if (from == view_.self().id) return reject(from, "Overlay message from ourselves");
  if (!overlay_ && cfg_.view != ViewMode::Full) go_partial(0);  // the swarm runs partial views
  merge_view(o.view);
  // (The fresh members the digest brought may have pushed the sender itself out of a full
  // passive view and View: it is the one we must hold to answer it.)
  if (overlay_ && !view_.find(from)) overlay_learn(o.view.front());
  heard_from(from);
  if (overlay_ && o.ready && !state_ready_) {
    overlay_->ready.insert(from);  // a member with a model to give us (bounded: the joiner's few)
    if (overlay_->ready.size() > 4 * overlay_->active_cap()) overlay_->ready.erase(overlay_->ready.begin());
  }
  const MemberDigest& me = view_.self();
  if (!overlay_) {
    // Full views (--view full) among peers with partial views: hold everyone, answer plainly.
    if (o.kind == OverlayKind::ForwardJoin || o.kind == OverlayKind::Shuffle) merge_view({o.subject});
    merge_view(o.peers);
    OverlayMsg r;
    if (o.kind == OverlayKind::Neighbor) {
      r.kind = OverlayKind::NeighborAccept;
      r.ready = state_ready_;
      r.view = digest();
      env_.send(from, make_message(r));
    } else if (o.kind == OverlayKind::Shuffle && o.subject.id != me.id) {
      r.kind = OverlayKind::ShuffleReply;
      r.subject = me;
      r.peers = view_.digest(kShuffleActive + kShufflePassive + 1, env_.rng());
      r.peers.erase(r.peers.begin());  // ourselves: already in r.view
      r.view = digest();
      env_.send(o.subject.id, make_message(r));
    }
    return;
  }
  switch (o.kind) {
    case OverlayKind::ForwardJoin: {
      const MemberDigest& j = o.subject;
      if (j.id == me.id || j.state != MemberState::Alive) return;
      // A member that has no model yet (joining itself) passes the walk on: the joiner's
      // model comes from where the walk ends.
      const bool can_serve = joined_ && state_ready_;
      if (o.ttl > 0 && (overlay_->active().size() > 1 || !can_serve)) {
        if (o.ttl == kPassiveWalk) overlay_learn(j);
        // (One that cannot serve may send the walk back where it came from.)
        PeerId next = overlay_->random_active(env_.rng(), from, j.id);
        if (next.empty() && !can_serve) next = overlay_->random_active(env_.rng(), j.id);
        if (!next.empty()) {
          OverlayMsg f;
          f.kind = OverlayKind::ForwardJoin;
          f.ttl = static_cast<std::uint8_t>(o.ttl - 1);
          f.subject = j;
          overlay_send(next, std::move(f));
          return;
        }
      }
      // The walk ends here: ask the joiner to be our neighbour (it always accepts: priority).
      overlay_learn(j);
      if (overlay_->in_active(j.id) || !overlay_->in_passive(j.id)) return;
      overlay_->pending[j.id] = env_.now();
      OverlayMsg n;
      n.kind = OverlayKind::Neighbor;
      n.priority = true;
      overlay_send(j.id, std::move(n));
      return;
    }
    case OverlayKind::Neighbor: {
      if (!view_.find(from) || leaving_) return;
      OverlayMsg r;
      if (o.priority || !overlay_->active_full() || overlay_->in_active(from)) {
        overlay_link(from);
        r.kind = OverlayKind::NeighborAccept;
      } else {
        r.kind = OverlayKind::NeighborReject;
      }
      overlay_send(from, r);
      // A joiner takes the model from a neighbour the join walk brought (not from the seed).
      if (r.kind == OverlayKind::NeighborAccept && joined_ && !state_ready_ && !transfer_ && o.ready && !is_seed(from))
        start_state_transfer(from);
      return;
    }
    case OverlayKind::NeighborAccept:
      if (!view_.find(from) || leaving_) return;
      overlay_->pending.erase(from);
      overlay_link(from);
      if (joined_ && !state_ready_ && !transfer_ && o.ready && !is_seed(from)) start_state_transfer(from);
      return;
    case OverlayKind::NeighborReject:
      // Not asked again for a shuffle period; the next candidate is asked at the next shuffle
      // tick, not at once (when every view is full, asking down the passive view at once is a
      // storm of requests and rejections for nothing).
      overlay_->pending.erase(from);
      overlay_->declined[from] = env_.now() + cfg_.shuffle_interval_s;
      if (overlay_->active().empty()) overlay_fill();
      return;
    case OverlayKind::Disconnect:
      overlay_->pending.erase(from);
      if (overlay_->demote(from, env_.rng())) overlay_fill();
      return;
    case OverlayKind::Shuffle: {
      if (o.subject.id == me.id) return;
      if (o.ttl > 0 && overlay_->active().size() > 1) {
        const PeerId next = overlay_->random_active(env_.rng(), from, o.subject.id);
        if (!next.empty()) {
          OverlayMsg f = o;
          f.ttl = static_cast<std::uint8_t>(o.ttl - 1);
          overlay_send(next, std::move(f));
          return;
        }
      }
      OverlayMsg r;
      r.kind = OverlayKind::ShuffleReply;
      r.subject = me;
      r.peers = overlay_sample(false);
      overlay_send(o.subject.id, std::move(r));
      overlay_accept_sample(o.peers);
      overlay_learn(o.subject);
      return;
    }
    case OverlayKind::ShuffleReply:
      overlay_accept_sample(o.peers);
      return;
  }
}

}  // namespace rumor
